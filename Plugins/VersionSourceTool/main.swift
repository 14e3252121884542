// VersionSourceTool VERSION-FILE OUTPUT: writes `extension Version { public
// static let current = "..." }` from the version file (the VersionSource
// plugin's step). The version goes into a Swift literal and an HTTP header,
// so it must be one line of letters, digits and `.+-`.

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

func fail(_ message: String) -> Never {
  let line = "VersionSourceTool: \(message)\n"
  _ = line.withCString { write(2, $0, strlen($0)) }
  exit(1)
}

func contents(of path: String) -> [UInt8] {
  guard let file = fopen(path, "rb") else { fail("cannot read \(path)") }
  defer { fclose(file) }
  var bytes: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 256)
  while true {
    let count = fread(&buffer, 1, buffer.count, file)
    if count == 0 { break }
    bytes += buffer[0..<count]
    if bytes.count > 4096 { fail("\(path) is too long for a version") }
  }
  return bytes
}

let arguments = CommandLine.arguments
guard arguments.count == 3 else { fail("usage: VersionSourceTool VERSION-FILE OUTPUT") }
var text = contents(of: arguments[1])
while let last = text.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") { text.removeLast() }
let allowed = Set("0123456789.+-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
guard !text.isEmpty, text.count <= 64, text.allSatisfy(allowed.contains) else {
  fail("\(arguments[1]) must hold one line of at most 64 letters, digits and .+- (a version such as 1.2.3)")
}
let version = String(decoding: text, as: UTF8.self)
let source = """
  // Made by the VersionSource plugin from VERSION; edit that file instead.
  extension Version {
    /// The package's version, from VERSION: what `bucketfs --version` prints and the User-Agent carries.
    public static let current = "\(version)"
  }

  """
guard let output = fopen(arguments[2], "wb") else { fail("cannot write \(arguments[2])") }
guard fputs(source, output) >= 0, fclose(output) == 0 else { fail("cannot write \(arguments[2])") }
