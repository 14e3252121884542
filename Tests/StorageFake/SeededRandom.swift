import Foundation

/// SplitMix64: a small generator that gives the same sequence for a seed on
/// every platform, so a randomized test can be replayed.
public struct SplitMix64: RandomNumberGenerator {
  private var state: UInt64

  public init(seed: UInt64) { state = seed }

  public mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  /// The generator a randomized test runs with: seeded by `BUCKETFS_TEST_SEED`
  /// when set, else by `seed`. The seed is printed, so that a failure can be
  /// replayed with `BUCKETFS_TEST_SEED=<seed> swift test --filter <test>`.
  public static func forTest(_ test: String = #function, seed: UInt64) -> SplitMix64 {
    let chosen = ProcessInfo.processInfo.environment["BUCKETFS_TEST_SEED"].flatMap { UInt64($0) } ?? seed
    print("\(test): seed \(chosen) (BUCKETFS_TEST_SEED overrides it)")
    return SplitMix64(seed: chosen)
  }
}
