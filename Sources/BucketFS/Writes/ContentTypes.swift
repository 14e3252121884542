import ObjectStore

/// A new file's contentType from its name's extension: the system's
/// mime.types when present (kept up to date by the distribution), else a
/// built-in table of common types; `application/octet-stream` otherwise.
struct ContentTypes: Sendable {
  static let fallback = "application/octet-stream"
  private let byExtension: [String: String]

  init(mimeTypesPath: String?) {
    if let mimeTypesPath, let text = Self.readFile(mimeTypesPath) {
      let table = Self.parse(text)
      byExtension = table.isEmpty ? Self.builtIn : table
    } else {
      byExtension = Self.builtIn
    }
  }

  init(table: [String: String]) {
    byExtension = table
  }

  /// The type for a file named `name` (last path component).
  func type(for name: String) -> String {
    let base = name.split(separator: "/").last.map(String.init) ?? name
    guard let dot = base.lastIndex(of: "."), dot != base.startIndex else { return Self.fallback }
    let ext = base[base.index(after: dot)...].lowercased()
    return byExtension[ext] ?? Self.fallback
  }

  /// mime.types lines: a type, then its extensions; `#` starts a comment.
  /// The first type that names an extension keeps it.
  static func parse(_ text: String) -> [String: String] {
    var table: [String: String] = [:]
    for line in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
      let content = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
      let words = content.split(whereSeparator: { $0 == " " || $0 == "\t" })
      guard words.count >= 2, words[0].contains("/") else { continue }
      for ext in words.dropFirst() where table[ext.lowercased()] == nil {
        table[ext.lowercased()] = String(words[0])
      }
    }
    return table
  }

  private static func readFile(_ path: String) -> String? {
    // Larger is not a mime.types file.
    LocalFile.contents(of: path, limit: 4 << 20).map { String(decoding: $0, as: UTF8.self) }
  }

  static let builtIn: [String: String] = [
    "txt": "text/plain", "text": "text/plain", "log": "text/plain", "md": "text/markdown",
    "csv": "text/csv", "tsv": "text/tab-separated-values", "html": "text/html", "htm": "text/html",
    "css": "text/css", "js": "text/javascript", "mjs": "text/javascript", "xml": "application/xml",
    "json": "application/json", "yaml": "application/yaml", "yml": "application/yaml",
    "pdf": "application/pdf", "zip": "application/zip", "gz": "application/gzip",
    "tgz": "application/gzip", "tar": "application/x-tar", "bz2": "application/x-bzip2",
    "xz": "application/x-xz", "7z": "application/x-7z-compressed", "wasm": "application/wasm",
    "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif",
    "webp": "image/webp", "svg": "image/svg+xml", "ico": "image/vnd.microsoft.icon", "bmp": "image/bmp",
    "tif": "image/tiff", "tiff": "image/tiff", "avif": "image/avif", "heic": "image/heic",
    "mp3": "audio/mpeg", "wav": "audio/wav", "ogg": "audio/ogg", "flac": "audio/flac", "m4a": "audio/mp4",
    "mp4": "video/mp4", "webm": "video/webm", "mov": "video/quicktime", "mkv": "video/x-matroska",
    "avi": "video/x-msvideo", "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf",
    "otf": "font/otf", "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "ppt": "application/vnd.ms-powerpoint",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "rtf": "application/rtf", "sh": "application/x-sh", "py": "text/x-python", "c": "text/x-c",
    "h": "text/x-c", "swift": "text/x-swift", "go": "text/x-go", "rs": "text/x-rust",
    "java": "text/x-java", "parquet": "application/vnd.apache.parquet", "avro": "application/avro",
  ]
}
