import MountOptionTable

/// What `mount --print-config` shows: every option of the table with the
/// value the mount would use (the command line's over the config file's
/// over the default), as YAML a `--config` file takes back. Options are
/// names and paths, never secrets: a token or key is read from its file.
enum EffectiveConfig {
  /// The value each option was given in `arguments` (a `mount`'s, after the
  /// config file's were put first), the last one winning; `-o` collects.
  static func given(in arguments: [String]) -> [String: [String]] {
    var given: [String: [String]] = [:]
    var index = arguments.startIndex
    while index < arguments.endIndex {
      let token = arguments[index]
      index += 1
      guard token.hasPrefix("-"), token != "-", token != "--" else { continue }
      let body = token.drop { $0 == "-" }
      let name = String(body.prefix { $0 != "=" })
      let inline = body.contains("=") ? String(body.drop { $0 != "=" }.dropFirst()) : nil
      guard let row = MountOptionTable.rows.first(where: { $0.name == name }) else { continue }
      if row.kind == .flag {
        given[name] = ["true"]
        continue
      }
      let value: String
      if let inline {
        value = inline
      } else if index < arguments.endIndex {
        value = arguments[index]
        index += 1
      } else {
        continue
      }
      if row.kind == .list { given[name, default: []].append(value) } else { given[name] = [value] }
    }
    return given
  }

  /// The YAML text: one `key: value` line per option in the table's order;
  /// an option without a value default and not given is a comment saying what applies.
  static func yaml(for arguments: [String]) -> String {
    let given = given(in: arguments)
    var lines: [String] = []
    for row in ConfigFile.settable {
      if let values = given[row.name] {
        switch row.kind {
        case .list: lines.append("\(row.name): [\(values.map(quoted).joined(separator: ", "))]")
        case .flag, .integer, .number: lines.append("\(row.name): \(values[0])")
        case .text: lines.append("\(row.name): \(quoted(values[0]))")
        }
      } else if let value = row.defaultValueText {
        lines.append("\(row.name): \(row.kind == .text ? quoted(value) : value)")
      } else {
        let note = row.defaultText.filter { $0 != "`" }
        lines.append("# \(row.name): (unset\(note.isEmpty ? "" : ": \(note)"))")
      }
    }
    return lines.joined(separator: "\n") + "\n"
  }

  /// A YAML double-quoted string: a JSON string is one (YAML 1.2 has JSON's escapes).
  static func quoted(_ text: String) -> String { LogLineFormat.quoted(text) }
}
