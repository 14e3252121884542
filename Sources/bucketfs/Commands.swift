import ArgumentParser
import AsyncHTTPClient
import BucketFS
import CFuse
import CloudStorage
import ContentCache
import Credentials
import Dispatch
import FUSE
import IOThreads
import Logging
import MetricsExport
import MountOptionTable
import ObjectStore
import ServiceAccess

#if canImport(Glibc)
  import Glibc
#endif

struct BucketFSCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "bucketfs",
    abstract: "Mount a Google Cloud Storage bucket as a directory; object metadata as extended attributes.",
    version: Version.current,
    subcommands: [Mount.self, Unmount.self, CleanParts.self])
}

private typealias T = MountOptionTable

/// An option's help and value name, from the table.
private func help<Value>(_ option: MountOption<Value>) -> ArgumentHelp {
  ArgumentHelp(option.help, valueName: option.valueName)
}

struct Mount: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Mount gs://BUCKET[/PREFIX] at MOUNTPOINT.",
    discussion: """
      By default checks that the bucket can be listed, then runs in the background and returns once \
      the mount is live.
      """)

  @Argument(help: "gs://BUCKET or gs://BUCKET/PREFIX.") var source: String
  @Argument(help: "An existing, empty directory.") var mountpoint: String

  // Names, help and defaults come from MountOptionTable (README's options table is its rendering).
  // --config and --print-config are acted on by ConfiguredMount, before these are parsed.
  @Option(name: .customLong(T.config.name), help: help(T.config)) var config: String?
  @Flag(name: .customLong(T.printConfig.name), help: help(T.printConfig))
  var printConfig = T.printConfig.value
  @Flag(name: .customLong(T.foreground.name), help: help(T.foreground))
  var foreground = T.foreground.value
  @Option(name: .customLong(T.endpoint.name), help: help(T.endpoint)) var endpoint: String?
  @Flag(name: .customLong(T.anonymous.name), help: help(T.anonymous))
  var anonymous = T.anonymous.value
  @Option(name: .customLong(T.credentials.name), help: help(T.credentials))
  var credentials: String?
  @Option(name: .customLong(T.accessTokenFile.name), help: help(T.accessTokenFile))
  var accessTokenFile: String?
  @Flag(name: .customLong(T.allowInsecureHTTP.name), help: help(T.allowInsecureHTTP))
  var allowInsecureHTTP = T.allowInsecureHTTP.value
  @Option(name: .customLong(T.billingProject.name), help: help(T.billingProject)) var billingProject: String?
  @Option(name: .customLong(T.caFile.name), help: help(T.caFile)) var caFile: String?
  @Option(name: .customShort(Character(T.options.name)), help: help(T.options))
  var options: [String] = []
  @Option(name: .customLong(T.pageSize.name), help: help(T.pageSize))
  var pageSize = T.pageSize.value
  @Option(name: .customLong(T.metadataTTL.name), help: help(T.metadataTTL))
  var metadataTTL = T.metadataTTL.value
  @Option(name: .customLong(T.negativeTTL.name), help: help(T.negativeTTL))
  var negativeTTL = T.negativeTTL.value
  @Option(name: .customLong(T.listCacheTTL.name), help: help(T.listCacheTTL))
  var listCacheTTL = T.listCacheTTL.value
  @Option(name: .customLong(T.requestTimeout.name), help: help(T.requestTimeout))
  var requestTimeout = T.requestTimeout.value
  @Option(name: .customLong(T.retryDeadline.name), help: help(T.retryDeadline))
  var retryDeadline = T.retryDeadline.value
  @Option(name: .customLong(T.renameDirLimit.name), help: help(T.renameDirLimit))
  var renameDirLimit = T.renameDirLimit.value
  @Option(name: .customLong(T.uploadThreshold.name), help: help(T.uploadThreshold))
  var uploadThreshold = T.uploadThreshold.value
  @Option(name: .customLong(T.uploadChunkSize.name), help: help(T.uploadChunkSize))
  var uploadChunkSize = T.uploadChunkSize.value
  @Option(name: .customLong(T.compositeUploadThreshold.name), help: help(T.compositeUploadThreshold))
  var compositeUploadThreshold = T.compositeUploadThreshold.value
  @Option(name: .customLong(T.compositePartSize.name), help: help(T.compositePartSize))
  var compositePartSize = T.compositePartSize.value
  @Option(name: .customLong(T.streamDiskLimit.name), help: help(T.streamDiskLimit))
  var streamDiskLimit: Int?
  @Option(name: .customLong(T.readAheadBudget.name), help: help(T.readAheadBudget))
  var readAheadBudget = T.readAheadBudget.value
  @Option(name: .customLong(T.maxInodes.name), help: help(T.maxInodes))
  var maxInodes = T.maxInodes.value
  @Option(name: .customLong(T.metadataCacheSize.name), help: help(T.metadataCacheSize))
  var metadataCacheSize = T.metadataCacheSize.value
  @Option(name: .customLong(T.maxConnections.name), help: help(T.maxConnections))
  var maxConnections = T.maxConnections.value
  @Option(name: .customLong(T.maxRequestsPerSecond.name), help: help(T.maxRequestsPerSecond))
  var maxRequestsPerSecond: Double?
  @Option(name: .customLong(T.maxBytesPerSecond.name), help: help(T.maxBytesPerSecond))
  var maxBytesPerSecond: Int?
  @Option(name: .customLong(T.appName.name), help: help(T.appName)) var appName: String?
  @Option(name: .customLong(T.logLevel.name), help: help(T.logLevel))
  var logLevel = T.logLevel.value
  @Option(name: .customLong(T.logFile.name), help: help(T.logFile)) var logFile: String?
  @Option(name: .customLong(T.logFormat.name), help: help(T.logFormat))
  var logFormat = T.logFormat.value
  @Option(name: .customLong(T.cacheDir.name), help: help(T.cacheDir)) var cacheDir: String?
  @Option(name: .customLong(T.readCacheSize.name), help: help(T.readCacheSize)) var readCacheSize: Int?
  @Flag(name: .customLong(T.firebaseDownloadTokens.name), help: help(T.firebaseDownloadTokens))
  var firebaseDownloadTokens = T.firebaseDownloadTokens.value
  @Flag(name: .customLong(T.refuseReadOnlyXattrs.name), help: help(T.refuseReadOnlyXattrs))
  var refuseReadOnlyXattrs = T.refuseReadOnlyXattrs.value
  @Option(name: .customLong(T.metricsAddr.name), help: help(T.metricsAddr)) var metricsAddr: String?
  @Option(name: .customLong(T.otlpEndpoint.name), help: help(T.otlpEndpoint)) var otlpEndpoint: String?
  @Option(help: .hidden) var readyFd: Int32?

  func validate() throws {
    try checkBillingProject(billingProject)
    guard (1...1000).contains(pageSize) else { throw ValidationError("--page-size must be 1 to 1000") }
    guard renameDirLimit >= 0 else { throw ValidationError("--rename-dir-limit must be 0 or more") }
    guard metadataTTL >= 0, negativeTTL >= 0, listCacheTTL >= 0 else {
      throw ValidationError("TTLs must not be negative")
    }
    guard listCacheTTL <= 31_536_000 else { throw ValidationError("--list-cache-ttl must be at most a year") }
    guard requestTimeout > 0, retryDeadline > 0 else { throw ValidationError("timeouts must be positive") }
    // Every request turns them into integer milli- and nanoseconds: a larger one (inf) would trap there.
    guard requestTimeout <= 31_536_000, retryDeadline <= 31_536_000 else {
      throw ValidationError("timeouts must be at most 31536000 seconds (a year)")
    }
    guard (0...(1 << 30)).contains(compositeUploadThreshold), (1...(1 << 20)).contains(compositePartSize)
    else {
      throw ValidationError(
        "--composite-upload-threshold must be 0 to 1073741824 MiB, --composite-part-size 1 to 1048576 MiB")
    }
    do {
      _ = try uploadPolicy()
    } catch {
      throw ValidationError("--upload-threshold / --upload-chunk-size: \(error)")
    }
    guard (1...(1 << 20)).contains(readAheadBudget) else {
      throw ValidationError("--read-ahead-budget must be 1 to 1048576 MiB")
    }
    guard (1024...(1 << 30)).contains(maxInodes) else {
      throw ValidationError("--max-inodes must be 1024 to 1073741824")
    }
    guard (0...(1 << 16)).contains(metadataCacheSize) else {
      throw ValidationError("--metadata-cache-size must be 0 to 65536 MiB")
    }
    if let streamDiskLimit, !(1...(1 << 30)).contains(streamDiskLimit) {
      throw ValidationError("--stream-disk-limit must be 1 to 1073741824 MiB")
    }
    if let readCacheSize, !(0...(1 << 30)).contains(readCacheSize) {
      throw ValidationError("--read-cache-size must be 0 to 1073741824 MiB")
    }
    guard Logger.Level(rawValue: logLevel) != nil else {
      throw ValidationError("unknown --log-level \(logLevel)")
    }
    guard (1...1024).contains(maxConnections) else {
      throw ValidationError("--max-connections must be 1 to 1024")
    }
    if let maxRequestsPerSecond, !(maxRequestsPerSecond >= 0.01 && maxRequestsPerSecond <= 1_000_000) {
      throw ValidationError("--max-requests-per-second must be 0.01 to 1000000")
    }
    if let maxBytesPerSecond, !(1024...(1 << 40)).contains(maxBytesPerSecond) {
      throw ValidationError("--max-bytes-per-second must be 1024 to 1099511627776")
    }
    if let appName, !Version.isValidAppName(appName) {
      throw ValidationError("--app-name must be 1 to 100 letters, digits and .-_+/")
    }
    guard LogLineFormat(rawValue: logFormat) != nil else {
      throw ValidationError("unknown --log-format \(logFormat) (text or json)")
    }
    if let metricsAddr, MetricsAddress(metricsAddr) == nil {
      throw ValidationError("--metrics-addr must be HOST:PORT ([::1]:PORT for IPv6) with a port 1 to 65535")
    }
  }

  func run() throws {
    if !foreground {
      // The background mount logs them too, but the terminal only sees this.
      if let directory = stageDirectory() {
        for leftover in Recovery.leftovers(in: directory) {
          writeStandardError("bucketfs: unsaved staged file from an earlier mount: \(leftover.description)\n")
        }
      }
      throw ExitCode(daemonize(arguments: CommandLine.arguments + ["--foreground"], logFile: logFile))
    }
    // List pages (~1 MB of JSON each) and read segments are large and
    // short-lived. glibc's adaptive threshold soon serves them from the heap,
    // where they fragment it; kept as mappings they go back to the system
    // when freed (peak RSS after `ls -l` of 100,000 files: 63 -> 55 MB).
    _ = cfuse_mmap_threshold(256 << 10)
    let outcome = Outcome(readyDescriptor: readyFd)
    do {
      try mount(outcome: outcome)
    } catch {
      outcome.fail(error.message)
      throw ExitCode(1)
    }
  }

  struct MountFailure: Error {
    let message: String
  }

  private func mount(outcome: Outcome) throws(MountFailure) {
    let logger = makeLogger()
    guard let source = BucketSource(source) else {
      throw MountFailure(message: "'\(self.source)' is not gs://BUCKET[/PREFIX]")
    }
    guard let rootPrefix = Names.rootPrefix(source.subtree) else {
      throw MountFailure(message: "prefix '\(source.subtree)' has a component no file name can show")
    }
    let mountOptions: MountOptionList
    do {
      mountOptions = try MountOptionList(options)
    } catch {
      throw MountFailure(message: error.description)
    }
    try checkMountpoint()

    let (endpoint, emulated) = try serviceEndpoint(
      self.endpoint, anonymous: anonymous, credentials: credentials, accessTokenFile: accessTokenFile,
      allowInsecureHTTP: allowInsecureHTTP)
    var retry = RetryPolicy()
    retry.attemptTimeout = requestTimeout
    retry.deadline = retryDeadline
    // Before any HTTP client: async-http-client takes the process's tracer when one is made.
    let traces = try startTraceExport(logger: logger)
    // Last out, after the unmount's settling: the spans of the mount's end are sent too.
    defer { if let traces { _ = blocking { await traces.shutdown(patience: .seconds(5)) } } }
    let trust = try certificateTrust(caFile: caFile, logger: logger)
    let http = CloudStorageClient.makeHTTPClient(retry: retry, trust: trust, maxConnections: maxConnections)
    defer { blocking { try? await http.shutdown() } }
    let tokens = try accessTokens(
      anonymous: anonymous || emulated, credentials: credentials, accessTokenFile: accessTokenFile,
      http: http, logger: logger)
    guard let uploads = try? uploadPolicy(partsUnder: rootPrefix) else {
      throw MountFailure(message: "bad --upload-threshold or --upload-chunk-size")  // validate() said why
    }
    // Before the client, filesystem and session make their series; off, they count into a no-op.
    let metricsAddress = metricsAddr.flatMap { MetricsAddress($0) }  // validate() checked it
    let metrics = try MetricsBackends(
      prometheus: metricsAddress != nil, otlpEndpoint: otlpEndpoint, environment: processEnvironment())
    let client = CloudStorageClient(
      bucket: source.bucket, endpoint: endpoint, http: http, tokens: tokens, retry: retry, uploads: uploads,
      logger: logger, userProject: billingProject, appName: appName,
      limiter: RequestLimiter(
        requestsPerSecond: maxRequestsPerSecond, bytesPerSecond: maxBytesPerSecond.map { Double($0) }))

    let where_ = "gs://\(source.bucket)/\(rootPrefix)"
    let check = blocking { () async -> Result<ListPage, any Error> in
      do {
        return .success(
          try await client.list(ListRequest(prefix: rootPrefix, delimiter: "/", pageSize: 1)))
      } catch {
        return .failure(error)
      }
    }
    if case .failure(let error) = check {
      switch error as? StorageError {
      case let refusal? where refusal.isRequesterPaysRefusal:
        throw MountFailure(message: requesterPaysAdvice(bucket: source.bucket))
      case .notFound: throw MountFailure(message: "bucket \(source.bucket) not found at \(endpoint)")
      case .accessDenied(let message): throw MountFailure(message: "access denied to \(where_): \(message)")
      case .unavailable(let reason): throw MountFailure(message: "cannot reach \(endpoint): \(reason)")
      case .tlsFailure(let message): throw MountFailure(message: message)
      default: throw MountFailure(message: "cannot list \(where_): \(error)")
      }
    }

    var configuration = Configuration()
    configuration.rootPrefix = rootPrefix
    configuration.pageSize = pageSize
    configuration.metadataTTL = metadataTTL
    configuration.negativeTTL = negativeTTL
    configuration.listCacheTTL = listCacheTTL
    configuration.uid = mountOptions.uid ?? getuid()
    configuration.gid = mountOptions.gid ?? getgid()
    configuration.fileMode = mountOptions.fileMode ?? configuration.fileMode
    configuration.directoryMode = mountOptions.directoryMode ?? configuration.directoryMode
    configuration.readOnly = mountOptions.readOnly
    configuration.posixAttributes = mountOptions.posixAttributes
    configuration.firebaseDownloadTokens = firebaseDownloadTokens
    configuration.refuseReadOnlyXattrs = refuseReadOnlyXattrs
    configuration.streamDiskLimit = streamDiskLimit.map { Int64($0) << 20 }
    if let directory = stageDirectory() {
      configuration.stageDirectory = directory
      let others = Recovery.leftovers(
        under: cacheDir ?? defaultCacheDirectory(), except: directory)
      for leftover in Recovery.leftovers(in: directory) + others {
        logger.warning(
          "unsaved staged file from an earlier mount, not uploaded: \(leftover.description); copy it into the mount or delete it"
        )
      }
    }
    if !mountOptions.readOnly { reportParts(client, logger: logger) }
    configuration.renameDirectoryLimit = renameDirLimit
    configuration.readAheadBudget = readAheadBudget << 20
    configuration.maxInodes = maxInodes
    configuration.metadataCacheBytes = metadataCacheSize << 20
    configuration.retryDeadline = retryDeadline

    // Blocking file work (the read cache's and the stages') runs here, off
    // the concurrency pool; the cache's fills wait for a pause of 250 ms in
    // the reads, up to 1 s.
    let diskWork = IOPool(
      threadCount: 4, byteLimit: 64 << 20, quiet: .milliseconds(250), maxDeferral: .seconds(1))
    let fileSystem = BucketFileSystem(
      store: readCache(around: client, pool: diskWork, logger: logger), configuration: configuration,
      logger: logger,
      onMounted: { outcome.ready() }, diskWork: diskWork)
    let session = FUSESession(fileSystem: fileSystem, logger: logger)
    var fuseOptions = FUSE.MountOptions(fsName: "gs://\(source.bucket)\(source.subtree)", subtype: "bucketfs")
    fuseOptions.readOnly = mountOptions.readOnly
    fuseOptions.allowOther = mountOptions.allowOther
    // Resolved before the mount: after it, resolving would ask the mount itself.
    let resolvedMountpoint = realPath(mountpoint)
    do {
      try session.mount(at: mountpoint, options: fuseOptions)
    } catch {
      throw MountFailure(message: "cannot mount at \(mountpoint): \(error.description)")
    }
    // Served from the mount's start to its end; a taken port fails the mount.
    var metricsServer: MetricsServer?
    if let metricsAddress, let registry = metrics.prometheus {
      do {
        metricsServer = try MetricsServer.start(at: metricsAddress, registry: registry)
      } catch {
        session.shutdown(grace: 0)
        throw MountFailure(message: error.description)
      }
      logger.info("serving metrics at http://\(metricsAddress)/metrics")
    }
    let metricExport = metrics.startOTLPExport(logger: logger)
    Signals.onSignal { signal in
      logger.info("signal \(signal): unmounting")
      ServiceManager.notify("STOPPING=1")
      session.requestExit()
    }
    let watch = MountWatch.start(path: resolvedMountpoint, isIdle: { fileSystem.openHandleCount == 0 }) {
      logger.warning(
        "\(mountpoint) was unmounted, nothing is open, but the kernel keeps the mount (another mount namespace holds a copy): ending it"
      )
      session.requestExit()
    }
    if watch == nil {
      logger.warning("\(mountpoint) is not in /proc/self/mountinfo: an unmount may not be noticed")
    }
    logger.info("mounted \(where_) at \(mountpoint) (endpoint \(endpoint))")
    session.run()
    watch?.stop()
    session.shutdown(grace: 5)
    fileSystem.settleBackgroundWork(within: 30)
    // Fills and uploads' cache entries still queued land; an entry left
    // incomplete lists only the blocks written, so abandoning is safe too.
    if !blocking({ await diskWork.shutdown(patience: .seconds(10)) }) {
      logger.warning("read cache: disk work still running after 10 s; not waiting for it")
    }
    metricsServer?.stop()
    // The counts of the mount's end go out too.
    if let metricExport { _ = blocking { await metricExport.shutdown(patience: .seconds(5)) } }
    logger.info("unmounted \(mountpoint)")
  }

  private func uploadPolicy(partsUnder root: String = "") throws -> UploadPolicy {
    try UploadPolicy(
      threshold: uploadThreshold, chunkSize: uploadChunkSize,
      compositeThreshold: Int64(compositeUploadThreshold) << 20,
      partSize: Int64(compositePartSize) << 20, partsUnder: root)
  }

  /// The client behind the read cache (MountOptionTable.readCacheSize), or
  /// the client alone when the cache is off or cannot be used.
  private func readCache(around client: CloudStorageClient, pool: IOPool, logger: Logger) -> any ObjectStore {
    if readCacheSize == 0 { return client }
    // A mount of the bucket that is still mounted is not one about to exit: no wait for it.
    return CachingStore.open(
      wrapping: client, cacheDirectory: cacheDir ?? defaultCacheDirectory(),
      limit: readCacheSize.map { Int64($0) << 20 }, pool: pool, mountpoint: realPath(mountpoint),
      isMounted: MountTable.isMountpoint, logger: logger) ?? client
  }

  private func makeLogger() -> Logger {
    let level = Logger.Level(rawValue: logLevel) ?? .info
    let sink: LineLogHandler.Sink
    if logFile != nil || readyFd == nil {
      sink = .descriptor(2)  // a log file is already stderr in the background
    } else {
      openlog("bucketfs", LOG_PID, LOG_DAEMON)
      sink = .syslog
    }
    let format = LogLineFormat(rawValue: logFormat) ?? .text  // validate() checked it
    return Logger(label: "bucketfs") { label in
      LineLogHandler(label: label, sink: sink, format: format, logLevel: level)
    }
  }
}
