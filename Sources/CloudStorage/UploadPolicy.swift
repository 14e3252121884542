/// How uploads are sent: one multipart request up to `threshold` bytes, a
/// resumable session in chunks of `chunkSize` above it, and above
/// `compositeThreshold` parts uploaded in parallel and composed
/// (CompositeUpload.swift).
public struct UploadPolicy: Sendable, Equatable {
  /// The service takes session chunks in multiples of this (all but the last).
  public static let chunkGranularity = 256 << 10
  /// The folder the parts of composite uploads are stored in:
  /// `PREFIX.bucketfs-parts/UPLOAD-ID/PART`, PREFIX the mount's root.
  public static let partDirectory = ".bucketfs-parts/"
  /// The service composes at most this many sources in one call.
  public static let composeLimit = 32

  /// Sizes at or below this go up in one multipart request (metadata + media).
  public private(set) var threshold: Int64 = 8 << 20
  /// Bytes per PUT of a resumable session; also the most read from the
  /// source at once for a multipart body; session chunks stream in 1 MiB pieces.
  public private(set) var chunkSize = 128 << 20
  /// Sizes above this go up as parts composed into the object; 0: never.
  public private(set) var compositeThreshold: Int64 = 32 << 20
  /// The smallest part; a larger file gets larger parts, so that it has at most `maxParts`.
  public private(set) var partSize: Int64 = 8 << 20
  /// Parts uploaded at once: 16, so that a 128 MiB file's 8 MiB parts all
  /// go up in one round (the service caps each connection, not the sum).
  public private(set) var parallelParts = 16
  /// Parts of one upload at most; above ``composeLimit`` they are composed in a tree.
  public private(set) var maxParts = UploadPolicy.composeLimit
  /// Where this client's parts go: ``partDirectory`` under a name prefix
  /// (a mount of a prefix keeps its parts, and its requests, inside it).
  public private(set) var partPrefix = UploadPolicy.partDirectory

  public struct Invalid: Error, CustomStringConvertible {
    public let description: String
  }

  public init() {}

  public init(
    threshold: Int64, chunkSize: Int, compositeThreshold: Int64 = 32 << 20, partSize: Int64 = 8 << 20,
    parallelParts: Int = 16, maxParts: Int = UploadPolicy.composeLimit, partsUnder prefix: String = ""
  ) throws(Invalid) {
    guard threshold >= 0 else { throw Invalid(description: "upload threshold must not be negative") }
    guard chunkSize > 0, chunkSize % Self.chunkGranularity == 0 else {
      throw Invalid(
        description:
          "upload chunk size \(chunkSize) must be a positive multiple of \(Self.chunkGranularity) (256 KiB)")
    }
    guard compositeThreshold >= 0 else {
      throw Invalid(description: "composite upload threshold must not be negative")
    }
    guard partSize > 0, parallelParts > 0 else {
      throw Invalid(description: "composite part size and parallel parts must be positive")
    }
    // A composite object has at most 1024 components, intermediate composites' parts counted.
    guard (2...1024).contains(maxParts) else {
      throw Invalid(description: "parts per upload must be 2 to 1024")
    }
    self.threshold = threshold
    self.chunkSize = chunkSize
    self.compositeThreshold = compositeThreshold
    self.partSize = partSize
    self.parallelParts = parallelParts
    self.maxParts = maxParts
    self.partPrefix = prefix + Self.partDirectory
  }

  /// Whether an upload of `size` bytes goes up as parts.
  public func isComposite(_ size: Int64) -> Bool {
    compositeThreshold > 0 && size > compositeThreshold
  }

  /// The byte ranges of the parts of `size` bytes: `partSize` each (the last
  /// shorter), larger when that would make more than `maxParts`.
  public func parts(of size: Int64) -> [Range<Int64>] {
    let each = max(partSize, (size + Int64(maxParts) - 1) / Int64(maxParts), Int64(1))
    return stride(from: Int64(0), to: size, by: Int(each)).map { $0..<min($0 + each, size) }
  }
}
