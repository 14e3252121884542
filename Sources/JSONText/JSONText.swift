/// JSON's string syntax, for the places that write JSON by hand (log lines,
/// OTLP requests, the fake service's answers): one escaper for all of them.
public enum JSONText {
  /// A JSON string: quotes, backslashes and control characters escaped (RFC 8259).
  public static func quoted(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\r": out += "\\r"
      case "\t": out += "\\t"
      case _ where scalar.value < 0x20:
        let digits = String(scalar.value, radix: 16)
        out += "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
      default: out.unicodeScalars.append(scalar)
      }
    }
    return out + "\""
  }
}
