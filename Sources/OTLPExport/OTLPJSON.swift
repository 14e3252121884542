import JSONText

/// What OTLP's JSON mapping writes the same way for every signal.
enum OTLPJSON {
  /// The protobuf JSON mapping's spellings for what JSON numbers cannot say.
  static func number(_ number: Double) -> String {
    if number.isNaN { return "\"NaN\"" }
    if number.isInfinite { return number < 0 ? "\"-Infinity\"" : "\"Infinity\"" }
    return "\(number)"
  }

  static func quoted(_ text: String) -> String { JSONText.quoted(text) }
}
