/// The package's version and the User-Agent that carries it. `current` is
/// made at build time from the file VERSION at the package's root (the
/// VersionSource plugin), so `bucketfs --version`, the User-Agent and
/// scripts/install.sh read the same one.
public enum Version {
  /// `bucketfs/VERSION`, or `bucketfs/VERSION (NAME)` so an operator can tell mounts apart in request logs.
  public static func userAgent(appName: String?) -> String {
    "bucketfs/\(current)" + (appName.map { " (\($0))" } ?? "")
  }

  /// An app name is safe in a header: 1 to 100 letters, digits and `.-_+/`.
  public static func isValidAppName(_ name: String) -> Bool {
    (1...100).contains(name.count)
      && name.unicodeScalars.allSatisfy {
        $0.isASCII
          && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".-_+/".unicodeScalars.contains($0))
      }
  }
}
