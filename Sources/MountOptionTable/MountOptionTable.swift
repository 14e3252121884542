/// The options of `bucketfs mount`: the one place each option's name,
/// default and meaning are written. The CLI builds its ArgumentParser
/// options (name, help, default) from it, README.md's options table is its
/// rendering (``MountOptionTable/markdownTable``), and a test checks that
/// README.md and the defaults docs/SEMANTICS.md states agree with it.
///
/// No dependencies, so the executable and a test target can both import it.

/// The type of an option's value, as a config file must give it.
public enum OptionKind: Sendable, Equatable {
  /// true or false; on the command line, present or absent.
  case flag
  case integer, number, text
  /// `-o`: values that accumulate.
  case list
}

/// What a numeric default counts, so prose ("8 MiB", "60 s") can be compared with it.
public enum OptionUnit: Sendable, Equatable {
  case none, count, seconds, bytes, mebibytes
}

/// One option. `Value` is the Swift type the CLI parses it into.
public struct MountOption<Value: Sendable>: Sendable {
  /// The long name without `--`, or the one letter of a short option.
  public let name: String
  public let isShort: Bool
  /// The value's placeholder in README (`S`, `N`, `FILE`); nil for a flag.
  public let valueName: String?
  /// The default the CLI uses; nil for an option that is absent by default.
  public let defaultValue: Value?
  public let unit: OptionUnit
  /// The default as README shows it, when it is not the value itself
  /// (absent options: what applies instead).
  public let defaultNote: String?
  /// Markdown, as README's table shows it; ``help`` is the plain-text form.
  public let meaning: String

  init(
    _ name: String, short: Bool = false, value valueName: String?, default defaultValue: Value?,
    unit: OptionUnit = .none, note defaultNote: String? = nil, _ meaning: String
  ) {
    self.name = name
    self.isShort = short
    self.valueName = valueName
    self.defaultValue = defaultValue
    self.unit = unit
    self.defaultNote = defaultNote
    self.meaning = meaning
  }

  /// The default value; only for options that have one (a trap otherwise is a table bug).
  public var value: Value { defaultValue! }

  /// The option as typed: `--page-size`, `-o`.
  public var spelling: String { isShort ? "-\(name)" : "--\(name)" }

  /// The default as README's table shows it.
  public var defaultText: String {
    if let defaultNote { return defaultNote }
    guard let defaultValue else { return "" }
    switch defaultValue {
    case let flag as Bool: return flag ? "on" : "off"
    case let seconds as Double: return MountOptionTable.number(seconds)
    case let bytes as Int64 where unit == .bytes: return MountOptionTable.bytes(Int(bytes))
    case let bytes as Int where unit == .bytes: return MountOptionTable.bytes(bytes)
    default: return "\(defaultValue)"
    }
  }

  /// The default as a number, for comparing with prose; nil if not numeric.
  public var numericDefault: Double? {
    switch defaultValue {
    case let value as Double: return value
    case let value as Int: return Double(value)
    case let value as Int64: return Double(value)
    default: return nil
    }
  }

  /// The ArgumentParser help: the meaning without Markdown, as a sentence;
  /// for an option without a value default, what applies instead.
  /// (ArgumentParser itself shows the default of an option that has one.)
  public var help: String {
    var text = meaning.replacingAll("`", with: "")
    if let first = text.first { text = first.uppercased() + text.dropFirst() }
    if defaultValue == nil, let defaultNote, !defaultNote.isEmpty {
      text += " (default: \(defaultNote.replacingAll("`", with: "")))"
    }
    return text.hasSuffix(".") ? text : text + "."
  }

  /// The value's type, from `Value`.
  public var kind: OptionKind {
    switch Value.self {
    case is Bool.Type: .flag
    case is Int.Type, is Int64.Type: .integer
    case is Double.Type: .number
    case is [String].Type: .list
    default: .text
    }
  }

  /// The default value as a config file or `--print-config` writes it; nil without one.
  public var defaultValueText: String? {
    switch defaultValue {
    case nil: nil
    case let seconds as Double: MountOptionTable.number(seconds)
    case let value?: "\(value)"
    }
  }

  public var row: MountOptionRow {
    MountOptionRow(
      spelling: spelling, valueName: valueName, defaultText: defaultText, meaning: meaning, unit: unit,
      numericDefault: numericDefault, name: name, kind: kind, defaultValueText: defaultValueText)
  }
}

/// An option without its Swift type: what documents are compared against.
public struct MountOptionRow: Sendable, Equatable {
  public let spelling: String
  public let valueName: String?
  public let defaultText: String
  public let meaning: String
  public let unit: OptionUnit
  public let numericDefault: Double?
  /// The name without dashes: also the option's key in a config file.
  public let name: String
  public let kind: OptionKind
  public let defaultValueText: String?

  /// The row of README's options table.
  public var markdown: String {
    let option = "`" + spelling + (valueName.map { " " + $0 } ?? "") + "`"
    return "|" + [option, defaultText, meaning].map { $0.isEmpty ? " " : " \($0) " }.joined(separator: "|")
      + "|"
  }
}

public enum MountOptionTable {
  public static let config = MountOption<String>(
    "config", value: "FILE", default: nil,
    "a YAML file of options, each under its name here without the dashes (`page-size: 500`, `o: [ro, allow_other]`); options given on the command line win over it"
  )
  public static let printConfig = MountOption<Bool>(
    "print-config", value: nil, default: false,
    "print the options the mount would use (command line, then `--config`, then defaults) as YAML, and exit")
  public static let foreground = MountOption<Bool>(
    "foreground", value: nil, default: false, "stay attached (systemd, debugging); logs go to stderr")
  public static let endpoint = MountOption<String>(
    "endpoint", value: "URL", default: nil, note: "`https://storage.googleapis.com`",
    "the JSON API endpoint; `STORAGE_EMULATOR_HOST=host:port` also sets it (and implies anonymous access, as Google's libraries do)"
  )
  public static let anonymous = MountOption<Bool>(
    "anonymous", value: nil, default: false, "send no credentials: public buckets and emulators")
  public static let credentials = MountOption<String>(
    "credentials", value: "FILE", default: nil, note: "discovery",
    "a service-account key or authorized-user JSON file (see Authentication)")
  public static let accessTokenFile = MountOption<String>(
    "access-token-file", value: "FILE", default: nil,
    "a file holding an OAuth access token (also: `BUCKETFS_ACCESS_TOKEN` in the environment)")
  public static let allowInsecureHTTP = MountOption<Bool>(
    "allow-insecure-http", value: nil, default: false,
    "plain `http://` is only accepted for loopback hosts unless this is given")
  public static let billingProject = MountOption<String>(
    "billing-project", value: "P", default: nil,
    "the project billed for a requester-pays bucket: sent as `userProject` on every request (fstab: `billing_project=P`)"
  )
  public static let caFile = MountOption<String>(
    "ca-file", value: "FILE", default: nil, note: "`SSL_CERT_FILE` / `SSL_CERT_DIR`, else the system store",
    "a PEM bundle of CA certificates trusted for this mount's HTTPS (the service and the token endpoints) in place of the system store (fstab: `ca_file=FILE`)"
  )
  public static let options = MountOption<[String]>(
    "o", short: true, value: "OPTIONS", default: nil,
    "comma-separated: `ro`, `allow_other`, `uid=N`, `gid=N`, `file_mode=0644`, `dir_mode=0755` (the owner and modes of objects that store none), `posix_attributes=off` (store no modes, owners or special files); always `nosuid,nodev`; mount(8) options (`_netdev`, `nofail`, `x-systemd.*`, …) are accepted and ignored"
  )
  public static let pageSize = MountOption<Int>(
    "page-size", value: "N", default: 1000, unit: .count,
    "entries per list call (the service's maximum is 1000)")
  public static let metadataTTL = MountOption<Double>(
    "metadata-ttl", value: "S", default: 60, unit: .seconds,
    "seconds listed or fetched metadata is trusted; also the kernel's entry and attribute timeout")
  public static let negativeTTL = MountOption<Double>(
    "negative-ttl", value: "S", default: 5, unit: .seconds,
    "seconds a missing name is remembered, by the kernel and by a complete listing of its directory")
  public static let listCacheTTL = MountOption<Double>(
    "list-cache-ttl", value: "S", default: 0, unit: .seconds,
    "seconds the kernel may keep a directory's listing and answer `ls` and walks from it; 0 (off): "
      + "every `opendir` lists. A change through the mount shows at once, another client's within S")
  public static let requestTimeout = MountOption<Double>(
    "request-timeout", value: "S", default: 30, unit: .seconds,
    "seconds without a byte from the service before an attempt is abandoned")
  public static let retryDeadline = MountOption<Double>(
    "retry-deadline", value: "S", default: 60, unit: .seconds,
    "seconds one operation may take, retries included, before it fails with EIO")
  public static let uploadThreshold = MountOption<Int64>(
    "upload-threshold", value: "BYTES", default: 8 << 20, unit: .bytes,
    "files up to this size go up in one multipart request; larger ones in a resumable session")
  public static let uploadChunkSize = MountOption<Int>(
    "upload-chunk-size", value: "BYTES", default: 128 << 20, unit: .bytes,
    "bytes per request of a resumable upload, a multiple of 262144 (256 KiB); each is streamed from the staged file in 1 MiB pieces, so it costs no memory"
  )
  public static let compositeUploadThreshold = MountOption<Int>(
    "composite-upload-threshold", value: "MiB", default: 32, unit: .mebibytes,
    "files larger than this go up as parts in parallel, composed into the object (which then has no `md5Hash`); 0 turns composite uploads off"
  )
  public static let compositePartSize = MountOption<Int>(
    "composite-part-size", value: "MiB", default: 8, unit: .mebibytes,
    "the smallest part of a composite upload; a file of more than 32 parts gets larger ones")
  public static let streamDiskLimit = MountOption<Int>(
    "stream-disk-limit", value: "MiB", default: nil,
    note: "128, at most half the room of `--cache-dir`",
    "disk a file written in order from its start may hold under `--cache-dir` once it streams (its parts go up while it is written, then leave the disk); at least two parts"
  )
  public static let cacheDir = MountOption<String>(
    "cache-dir", value: "DIR", default: nil,
    note: "`/var/cache/bucketfs` for root, else `$XDG_CACHE_HOME/bucketfs` (`~/.cache/bucketfs`)",
    "where files being written are staged (a private 0700 directory per mount); leftovers of a crash are listed at mount"
  )
  public static let readCacheSize = MountOption<Int>(
    "read-cache-size", value: "MiB", default: nil,
    note: "1024, at most a tenth of the free space of `--cache-dir`",
    "disk under `--cache-dir` that the read cache may use: bytes read or written are kept by object generation and served again without a request, across remounts; 0 turns it off"
  )
  public static let firebaseDownloadTokens = MountOption<Bool>(
    "firebase-download-tokens", value: nil, default: false,
    "give each new object a random `firebaseStorageDownloadTokens`, as the Firebase SDKs do, so `getDownloadURL` works for it"
  )
  public static let refuseReadOnlyXattrs = MountOption<Bool>(
    "refuse-read-only-xattrs", value: nil, default: false,
    "answer `EPERM` to setting or removing a read-only property (`user.generation`, `user.md5Hash`, …) instead of accepting and ignoring it"
  )
  public static let renameDirLimit = MountOption<Int>(
    "rename-dir-limit", value: "N", default: 1000, unit: .count,
    "objects a directory rename moves at most; a larger directory gives EXDEV, so `mv` copies it")
  public static let readAheadBudget = MountOption<Int>(
    "read-ahead-budget", value: "MiB", default: 256, unit: .mebibytes,
    "memory read-ahead may hold at once, all open files together; when it is short, reads fetch smaller segments"
  )
  public static let maxInodes = MountOption<Int>(
    "max-inodes", value: "N", default: 32768, unit: .count,
    "inodes the mount holds for the kernel at most (about 400 bytes each, measured); past them the kernel is asked to drop the least recently used names, which a later use looks up again. Open files are never dropped. Raise it for a working set larger than that (a source tree stat-ed over and over)"
  )
  public static let metadataCacheSize = MountOption<Int>(
    "metadata-cache-size", value: "MiB", default: 8, unit: .mebibytes,
    "memory the full metadata of listed and fetched files may hold (what getfattr and listxattr answer from without a request); the oldest goes first. What stat needs is kept with each inode"
  )
  public static let maxConnections = MountOption<Int>(
    "max-connections", value: "N", default: 64, unit: .count,
    "connections to the service the mount has open at most, all requests together (1 to 1024); a request beyond them waits for a free one, within its deadline"
  )
  public static let maxRequestsPerSecond = MountOption<Double>(
    "max-requests-per-second", value: "R", default: nil, note: "off",
    "requests a second the mount sends at most, reads, writes and listings together; a request waits its turn (a token bucket holding half a second's worth), it never fails for it"
  )
  public static let maxBytesPerSecond = MountOption<Int>(
    "max-bytes-per-second", value: "B", default: nil, note: "off",
    "bytes a second the mount sends and receives at most, all requests together, paced like `--max-requests-per-second`"
  )
  public static let appName = MountOption<String>(
    "app-name", value: "NAME", default: nil,
    "sent in every request's `User-Agent` as `bucketfs/VERSION (NAME)`, to tell mounts apart in the bucket's request logs; letters, digits and `.-_+/`, at most 100"
  )
  public static let logLevel = MountOption<String>(
    "log-level", value: "L", default: "info", "trace, debug, info, notice, warning, error, critical")
  public static let logFile = MountOption<String>(
    "log-file", value: "PATH", default: nil,
    "append logs here (default: stderr in the foreground, syslog in the background)")
  public static let logFormat = MountOption<String>(
    "log-format", value: "F", default: "text",
    "`text`, or `json`: one JSON object a line with `time` (RFC 3339, UTC), `severity` (Cloud Logging's names), `message`, `component` and the line's fields; to `--log-file`, stderr and syslog alike"
  )
  public static let metricsAddr = MountOption<String>(
    "metrics-addr", value: "HOST:PORT", default: nil, note: "off",
    "serve Prometheus metrics at `http://HOST:PORT/metrics`, bound to that host only (`[::1]:PORT` for IPv6), while the mount is up; the series are in docs/SEMANTICS.md"
  )
  public static let otlpEndpoint = MountOption<String>(
    "otlp-endpoint", value: "URL", default: nil, note: "off (or `OTEL_EXPORTER_OTLP_ENDPOINT`)",
    "export traces as OTLP/HTTP JSON to `URL/v1/traces` (http or https): a span per FUSE operation with a child per storage request; and the metrics to `URL/v1/metrics` every `OTEL_METRIC_EXPORT_INTERVAL` ms (60,000); wins over `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (a full URL); `OTEL_EXPORTER_OTLP_HEADERS` are sent; unset, nothing is exported and no connection is made (docs/SEMANTICS.md)"
  )

  /// Every option, in README's order.
  public static let rows: [MountOptionRow] = [
    config.row, printConfig.row, foreground.row, endpoint.row, anonymous.row, credentials.row,
    accessTokenFile.row, allowInsecureHTTP.row, billingProject.row, caFile.row, options.row, pageSize.row,
    metadataTTL.row, negativeTTL.row,
    listCacheTTL.row, requestTimeout.row, retryDeadline.row, uploadThreshold.row, uploadChunkSize.row,
    compositeUploadThreshold.row, compositePartSize.row, streamDiskLimit.row, cacheDir.row,
    readCacheSize.row,
    firebaseDownloadTokens.row, refuseReadOnlyXattrs.row, renameDirLimit.row, readAheadBudget.row,
    maxInodes.row, metadataCacheSize.row, maxConnections.row, maxRequestsPerSecond.row, maxBytesPerSecond.row,
    appName.row,
    logLevel.row,
    logFile.row, logFormat.row,
    metricsAddr.row, otlpEndpoint.row,
  ]

  /// README.md's options table, exactly.
  public static var markdownTable: String {
    (["| option | default | meaning |", "|---|---|---|"] + rows.map(\.markdown)).joined(separator: "\n")
  }

  /// A number as the command line takes it: 60 → "60", 0.5 → "0.5".
  public static func numberText(_ value: Double) -> String { number(value) }

  /// 60 → "60", 0.5 → "0.5".
  static func number(_ value: Double) -> String {
    value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
  }

  /// 8388608 → "8388608 (8 MiB)".
  static func bytes(_ value: Int) -> String {
    value >= 1 << 20 && value % (1 << 20) == 0 ? "\(value) (\(value >> 20) MiB)" : "\(value)"
  }
}

extension String {
  fileprivate func replacingAll(_ target: Character, with replacement: String) -> String {
    var result = ""
    for character in self {
      if character == target { result += replacement } else { result.append(character) }
    }
    return result
  }
}
