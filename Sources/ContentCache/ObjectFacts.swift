import ObjectStore
import Synchronization

/// The size and CRC-32C of recently seen objects, from the metadata that
/// passes through the cache (lookups, listings, uploads): what a complete
/// entry is checked against. Bounded; the oldest are forgotten first.
final class ObjectFacts: Sendable {
  struct Fact: Sendable, Equatable {
    let generation: Int64
    let size: Int64
    let crc: UInt32?
  }
  private struct State {
    var facts: [String: Fact] = [:]
    /// Names in the order they were added; `head` is the oldest still counted.
    var order: [String] = []
    var head = 0
  }

  private let capacity: Int
  private let state = Mutex(State())

  init(capacity: Int = 16384) {
    self.capacity = capacity
  }

  func learn(_ object: ObjectMetadata) {
    let fact = Fact(
      generation: object.generation, size: object.size,
      crc: object.crc32c.flatMap { CRC32C.value(base64: $0) })
    state.withLock { state in
      if state.facts.updateValue(fact, forKey: object.name) == nil { state.order.append(object.name) }
      while state.facts.count > capacity, state.head < state.order.count {
        state.facts[state.order[state.head]] = nil
        state.head += 1
      }
      if state.head > capacity {
        state.order.removeFirst(state.head)
        state.head = 0
      }
    }
  }

  /// What is known of that generation of the object.
  func fact(_ name: String, generation: Int64) -> Fact? {
    state.withLock { state in state.facts[name].flatMap { $0.generation == generation ? $0 : nil } }
  }
}
