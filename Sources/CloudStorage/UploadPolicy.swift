/// How uploads are sent: one multipart request up to `threshold` bytes, a
/// resumable session in chunks of `chunkSize` above it.
public struct UploadPolicy: Sendable, Equatable {
  /// The service takes session chunks in multiples of this (all but the last).
  public static let chunkGranularity = 256 << 10

  /// Sizes at or below this go up in one multipart request (metadata + media).
  public private(set) var threshold: Int64 = 8 << 20
  /// Bytes per PUT of a resumable session; also the most read from the
  /// source at once for a multipart body; session chunks stream in 1 MiB pieces.
  public private(set) var chunkSize = 128 << 20

  public struct Invalid: Error, CustomStringConvertible {
    public let description: String
  }

  public init() {}

  public init(threshold: Int64, chunkSize: Int) throws(Invalid) {
    guard threshold >= 0 else { throw Invalid(description: "upload threshold must not be negative") }
    guard chunkSize > 0, chunkSize % Self.chunkGranularity == 0 else {
      throw Invalid(
        description:
          "upload chunk size \(chunkSize) must be a positive multiple of \(Self.chunkGranularity) (256 KiB)")
    }
    self.threshold = threshold
    self.chunkSize = chunkSize
  }
}
