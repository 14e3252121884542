import Logging

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif
#if canImport(Glibc)
  import Glibc
#endif

/// `credential_source.executable`: a program that prints the subject token as JSON (Google's
/// "pluggable" source). It runs only when GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1, as
/// Google's libraries require, since the file then decides what runs.
public struct ExecutableSource: Sendable {
  /// The command, split as a shell would split words (no expansion).
  public let arguments: [String]
  public let timeoutMilliseconds: Int
  /// Where the program may leave its answer for the next time (used while it is unexpired).
  public let outputFile: String?

  public var program: String { arguments.first ?? "" }

  static let allowVariable = "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES"
  static let supportedVersion: Double = 1

  init(_ fields: JSONFields) throws {
    let command = try fields.required("command")
    guard let words = Self.split(command), !words.isEmpty else {
      throw fields.invalid("field credential_source.executable.command has an unclosed quote")
    }
    arguments = words
    if let millis = try fields.number("timeout_millis") {
      guard millis.rounded() == millis, (5000...120_000).contains(millis) else {
        throw fields.invalid("field credential_source.executable.timeout_millis is not from 5000 to 120000")
      }
      timeoutMilliseconds = Int(millis)
    } else {
      timeoutMilliseconds = 30_000
    }
    outputFile = try fields.string("output_file")
  }

  /// Words separated by white space; single quotes, double quotes and backslashes as in sh.
  static func split(_ command: String) -> [String]? {
    var words: [String] = []
    var word = ""
    var inWord = false
    var quote: Character?
    var escaped = false
    for character in command {
      if escaped {
        word.append(character)
        escaped = false
      } else if let open = quote {
        if character == open {
          quote = nil
        } else if character == "\\" && open == "\"" {
          escaped = true
        } else {
          word.append(character)
        }
      } else if character == "\\" {
        escaped = true
        inWord = true
      } else if character == "'" || character == "\"" {
        quote = character
        inWord = true
      } else if character == " " || character == "\t" || character == "\n" {
        if inWord { words.append(word) }
        word = ""
        inWord = false
      } else {
        word.append(character)
        inWord = true
      }
    }
    guard quote == nil, !escaped else { return nil }
    if inWord { words.append(word) }
    return words
  }

  func subjectToken(_ context: SubjectTokenSource.Context) async throws -> String {
    let name = "executable \(program)"
    guard context.environment[Self.allowVariable] == "1" else {
      throw CredentialsError.subjectTokenUnavailable(
        source: name, reason: "executables must be allowed: set \(Self.allowVariable)=1")
    }
    if let outputFile, let cached = try cachedToken(outputFile, context: context) { return cached }

    var environment = context.environment
    environment["GOOGLE_EXTERNAL_ACCOUNT_AUDIENCE"] = context.audience
    environment["GOOGLE_EXTERNAL_ACCOUNT_TOKEN_TYPE"] = context.subjectTokenType
    environment["GOOGLE_EXTERNAL_ACCOUNT_INTERACTIVE"] = "0"
    environment["GOOGLE_EXTERNAL_ACCOUNT_IMPERSONATED_EMAIL"] = context.impersonatedEmail
    environment["GOOGLE_EXTERNAL_ACCOUNT_OUTPUT_FILE"] = outputFile
    context.logger.debug("running \(name) for the subject token")
    let outcome = try await ChildProcess.run(
      arguments, environment: environment, timeoutMilliseconds: timeoutMilliseconds, name: name)
    guard outcome.status == 0 else {
      // Its output is not shown: it may hold the token.
      throw CredentialsError.subjectTokenUnavailable(source: name, reason: outcome.failure)
    }
    var answer = outcome.output
    if answer.allSatisfy({ $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }), let outputFile {
      // A program may answer in the output file alone.
      answer = (try? SecretFile.contents(of: outputFile, logger: context.logger, warnIfShared: false)) ?? []
    }
    let response = try ExecutableResponse(answer, source: name)
    if outputFile != nil, response.expiration == nil {
      throw CredentialsError.subjectTokenUnavailable(
        source: name, reason: "the answer has no expiration_time, which an output_file requires")
    }
    return try response.token(source: name)
  }

  /// The output file's token while it is unexpired; nil to run the program. A file that is
  /// not an answer at all is an error, as in Google's libraries.
  private func cachedToken(_ path: String, context: SubjectTokenSource.Context) throws -> String? {
    guard let bytes = try? SecretFile.contents(of: path, logger: context.logger, warnIfShared: false),
      JSONValue.parse(bytes) != nil
    else { return nil }
    let name = "output file \(path)"
    let response = try ExecutableResponse(bytes, source: name)
    guard response.success, let expiration = response.expiration, expiration > Date().timeIntervalSince1970
    else { return nil }
    context.logger.debug("subject token from \(name), valid until \(Int(expiration))")
    return try response.token(source: name)
  }
}

/// The JSON an executable answers: version, success, token_type, id_token or saml_response,
/// expiration_time; or, when success is false, code and message.
struct ExecutableResponse {
  var success: Bool
  var tokenType: String?
  var idToken: String?
  var samlResponse: String?
  var expiration: Double?
  var code: String?
  var message: String?

  init(_ bytes: [UInt8], source: String) throws {
    func unusable(_ reason: String) -> CredentialsError {
      .subjectTokenUnavailable(source: source, reason: reason)
    }
    guard let members = JSONValue.parse(bytes)?.object else {
      throw unusable("the answer is not a JSON object")
    }
    guard let version = members["version"]?.number else { throw unusable("the answer has no version") }
    guard version <= ExecutableSource.supportedVersion else {
      throw unusable("the answer's version \(Int(exactly: version).map(String.init) ?? "?") is not supported")
    }
    guard case .bool(let success) = members["success"] else { throw unusable("the answer has no success") }
    self.success = success
    tokenType = members["token_type"]?.string
    idToken = members["id_token"]?.string
    samlResponse = members["saml_response"]?.string
    expiration = members["expiration_time"]?.number
    code = members["code"]?.string ?? members["code"]?.number.map { "\(Int(exactly: $0) ?? 0)" }
    message = members["message"]?.string
  }

  func token(source: String) throws -> String {
    func unusable(_ reason: String) -> CredentialsError {
      .subjectTokenUnavailable(source: source, reason: reason)
    }
    guard success else {
      guard let code, let message else { throw unusable("unsuccessful, without code and message") }
      let shown = Redaction.scrub(message, secrets: [idToken, samlResponse].compactMap { $0 })
      throw unusable("unsuccessful: code \(Redaction.scrub(code, secrets: [])), message \(shown)")
    }
    if let expiration, expiration < Date().timeIntervalSince1970 {
      throw unusable("the token it gave has expired")
    }
    let token: String?
    switch tokenType {
    case "urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token": token = idToken
    case "urn:ietf:params:oauth:token-type:saml2": token = samlResponse
    case nil: throw unusable("the answer has no token_type")
    default: throw unusable("token_type is not jwt, id_token or saml2")
    }
    guard let token, !token.isEmpty else { throw unusable("the answer holds no token") }
    return token
  }
}
