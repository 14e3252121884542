import MountOptionTable
import Yams

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// `--config FILE`: a YAML mapping from the options' names (MountOptionTable)
/// to their values. It becomes arguments put before the command line's, so a
/// flag given on the command line wins over the file, and the file over the
/// defaults.
struct ConfigFile {
  let path: String
  /// The file's settings as `mount` arguments.
  let arguments: [String]
  /// The keys the file set.
  let keys: Set<String>

  /// Every problem of the file, one line each naming the key and the file.
  struct Problems: Error {
    let lines: [String]
  }

  /// The options a file may set: every one of the table's but the file itself.
  static var settable: [MountOptionRow] {
    MountOptionTable.rows.filter {
      $0.name != MountOptionTable.config.name && $0.name != MountOptionTable.printConfig.name
    }
  }

  init(path: String) throws(Problems) {
    self.path = path
    let text: String
    do {
      text = try String(contentsOfFile: path, encoding: .utf8)
    } catch {
      throw Problems(lines: ["\(path): cannot read the config file: \(error.localizedDescription)"])
    }
    let root: Node?
    do {
      root = try Yams.compose(yaml: text)
    } catch {
      throw Problems(lines: ["\(path): not YAML: \(Self.oneLine("\(error)"))"])
    }
    guard let root else {  // an empty file sets nothing
      arguments = []
      keys = []
      return
    }
    guard let mapping = root.mapping else {
      throw Problems(lines: ["\(path): must be a mapping of option names to values"])
    }
    var arguments: [String] = []
    var keys: Set<String> = []
    var problems: [String] = []
    for (keyNode, value) in mapping {
      guard let key = keyNode.scalar?.string else {
        problems.append("\(path): a key that is not a name")
        continue
      }
      guard let row = Self.settable.first(where: { $0.name == key }) else {
        problems.append("\(path): unknown key '\(key)'")
        continue
      }
      if keys.contains(key) {
        problems.append("\(path): key '\(key)' is given twice")
        continue
      }
      keys.insert(key)
      switch Self.arguments(for: row, value) {
      case .success(let more): arguments += more
      case .failure(let problem): problems.append("\(path): key '\(key)': \(problem.reason)")
      }
    }
    guard problems.isEmpty else { throw Problems(lines: problems) }
    self.arguments = arguments
    self.keys = keys
  }

  struct WrongValue: Error {
    let reason: String
  }

  /// One key's value as arguments, checked against the option's type.
  static func arguments(for row: MountOptionRow, _ value: Node) -> Result<[String], WrongValue> {
    let spelling = row.spelling
    switch row.kind {
    case .flag:
      guard let flag = value.scalar.flatMap({ Bool.construct(from: $0) }) else {
        return .failure(WrongValue(reason: "must be true or false"))
      }
      return .success(flag ? [spelling] : [])
    case .integer:
      guard let scalar = value.scalar, scalar.style == .plain, let number = Int.construct(from: scalar) else {
        return .failure(WrongValue(reason: "must be a whole number"))
      }
      return .success([spelling, String(number)])
    case .number:
      guard let scalar = value.scalar, scalar.style == .plain, let number = Double.construct(from: scalar),
        number.isFinite
      else {
        return .failure(WrongValue(reason: "must be a number"))
      }
      return .success([spelling, MountOptionTable.numberText(number)])
    case .text:
      guard let scalar = value.scalar, !scalar.string.isEmpty else {
        return .failure(WrongValue(reason: "must be a string"))
      }
      return .success([spelling, scalar.string])
    case .list:
      if let scalar = value.scalar { return .success([spelling, scalar.string]) }
      guard let items = value.sequence?.map({ $0.scalar?.string }), !items.contains(nil) else {
        return .failure(WrongValue(reason: "must be a string or a list of strings"))
      }
      return .success(items.compactMap { $0 }.flatMap { [spelling, $0] })
    }
  }

  private static func oneLine(_ text: String) -> String {
    text.split(whereSeparator: \.isNewline).joined(separator: " ")
  }
}
