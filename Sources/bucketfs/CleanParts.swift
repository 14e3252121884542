import ArgumentParser
import AsyncHTTPClient
import BucketFS
import CloudStorage
import Logging
import MountOptionTable
import ObjectStore

private typealias T = MountOptionTable

/// `bucketfs clean-parts gs://BUCKET`: deletes the parts that composite
/// uploads left under `.bucketfs-parts/` (a crash or kill mid-upload).
struct CleanParts: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "clean-parts",
    abstract:
      "Delete the parts interrupted composite uploads left under gs://BUCKET[/PREFIX]/\(UploadPolicy.partDirectory).",
    discussion: """
      Parts of uploads that began less than --older-than seconds ago are spared: they may belong to an \
      upload under way in another mount.
      """)

  @Argument(help: "gs://BUCKET or gs://BUCKET/PREFIX, as it is mounted.")
  var source: String
  @Option(help: "Spare parts of uploads younger than this many seconds.") var olderThan: Double = 86400
  @Option(name: .customLong(T.endpoint.name), help: ArgumentHelp(T.endpoint.help, valueName: "URL"))
  var endpoint: String?
  @Flag(name: .customLong(T.anonymous.name), help: ArgumentHelp(T.anonymous.help)) var anonymous = false
  @Option(name: .customLong(T.credentials.name), help: ArgumentHelp(T.credentials.help, valueName: "FILE"))
  var credentials: String?
  @Option(
    name: .customLong(T.accessTokenFile.name), help: ArgumentHelp(T.accessTokenFile.help, valueName: "FILE"))
  var accessTokenFile: String?
  @Flag(name: .customLong(T.allowInsecureHTTP.name), help: ArgumentHelp(T.allowInsecureHTTP.help))
  var allowInsecureHTTP = false
  @Option(
    name: .customLong(T.billingProject.name), help: ArgumentHelp(T.billingProject.help, valueName: "P"))
  var billingProject: String?
  @Option(name: .customLong(T.caFile.name), help: ArgumentHelp(T.caFile.help, valueName: "FILE"))
  var caFile: String?

  func validate() throws {
    try checkBillingProject(billingProject)
    guard olderThan >= 0, olderThan <= 31_536_000 else {
      throw ValidationError("--older-than must be 0 to 31536000 seconds")
    }
  }

  func run() throws {
    let logger = Logger(label: "bucketfs") { label in
      LineLogHandler(label: label, sink: .descriptor(2), logLevel: .notice)
    }
    guard let source = BucketSource(source), let root = Names.rootPrefix(source.subtree),
      let uploads = try? UploadPolicy(threshold: 0, chunkSize: 1 << 20, partsUnder: root)
    else {
      writeStandardError("bucketfs: '\(self.source)' is not gs://BUCKET[/PREFIX]\n")
      throw ExitCode(2)
    }
    let bucket = source.bucket
    let http: HTTPClient
    do {
      http = CloudStorageClient.makeHTTPClient(
        retry: RetryPolicy(), trust: try certificateTrust(caFile: caFile, logger: logger))
    } catch {
      writeStandardError("bucketfs: \(error.message)\n")
      throw ExitCode(1)
    }
    defer { blocking { try? await http.shutdown() } }
    let client: CloudStorageClient
    do {
      let (endpoint, emulated) = try serviceEndpoint(
        endpoint, anonymous: anonymous, credentials: credentials, accessTokenFile: accessTokenFile,
        allowInsecureHTTP: allowInsecureHTTP)
      let tokens = try accessTokens(
        anonymous: anonymous || emulated, credentials: credentials, accessTokenFile: accessTokenFile,
        http: http, logger: logger)
      client = CloudStorageClient(
        bucket: bucket, endpoint: endpoint, http: http, tokens: tokens, uploads: uploads, logger: logger,
        userProject: billingProject)
    } catch {
      writeStandardError("bucketfs: \(error.message)\n")
      throw ExitCode(1)
    }
    let age = olderThan
    let outcome = blocking { () async -> Result<CloudStorageClient.PartsRemoval, any Error> in
      do {
        return .success(try await client.removeLeftoverParts(olderThan: age))
      } catch {
        return .failure(error)
      }
    }
    switch outcome {
    case .success(let done):
      print(
        "deleted \(done.removed) part object(s) under gs://\(bucket)/\(client.partPrefix)"
          + (done.spared > 0 ? "; spared \(done.spared) of uploads begun in the last \(Int(age)) s" : "")
          + (done.failed > 0 ? "; \(done.failed) could not be deleted" : ""))
      if done.failed > 0 { throw ExitCode(1) }
    case .failure(let error as StorageError) where error.isRequesterPaysRefusal:
      writeStandardError("bucketfs: \(requesterPaysAdvice(bucket: bucket))\n")
      throw ExitCode(1)
    case .failure(let error):
      writeStandardError("bucketfs: cannot clean gs://\(bucket)/\(client.partPrefix): \(error)\n")
      throw ExitCode(1)
    }
  }
}

extension Mount {
  /// One list call: parts that interrupted composite uploads left are named
  /// in one log line with the command that deletes them.
  func reportParts(_ client: CloudStorageClient, logger: Logger) {
    let found = blocking { () async -> (count: Int, more: Bool)? in
      guard let page = try? await client.leftoverParts() else { return nil }
      return (page.parts.count, page.more)
    }
    guard let found, found.count > 0 else { return }
    logger.warning(
      "\(found.count)\(found.more ? "+" : "") part object(s) under gs://\(client.bucket)/\(client.partPrefix), left by interrupted composite uploads (or of one under way in another mount); delete them with: \(client.cleanCommand)"
    )
  }
}
