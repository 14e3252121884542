import ArgumentParser
import MountOptionTable

#if canImport(Glibc)
  import Glibc
#endif

/// `bucketfs mount` with `--config FILE` or `--print-config`: the file's
/// options are put before the command line's (so a flag wins over the file,
/// the file over the defaults), and every error is one line.
enum ConfiguredMount {
  /// Whether `arguments` (after the program's name) need this path.
  static func applies(to arguments: [String]) -> Bool {
    let spellings = [MountOptionTable.config.spelling, MountOptionTable.printConfig.spelling]
    guard arguments.first == "mount" else { return false }
    return arguments.contains { token in
      spellings.contains { token == $0 || token.hasPrefix($0 + "=") }
    }
  }

  /// Runs `mount` with `arguments` (after `mount`) and exits.
  static func main(_ arguments: [String]) -> Never {
    let path = EffectiveConfig.given(in: arguments)[MountOptionTable.config.name]?.last
    var file: ConfigFile?
    if let path {
      do {
        file = try ConfigFile(path: path)
      } catch {
        for line in error.lines { writeStandardError("bucketfs: \(line)\n") }
        exit(ExitCode.validationFailure.rawValue)
      }
    }
    let expanded = (file?.arguments ?? []) + arguments
    do {
      let mount = try Mount.parse(expanded)
      if mount.printConfig {
        writeStandardOutput(EffectiveConfig.yaml(for: expanded))
        exit(0)
      }
      try mount.run()
      exit(0)
    } catch let code as ExitCode {
      exit(code.rawValue)
    } catch {
      let status = Mount.exitCode(for: error)
      let message = Mount.message(for: error)
      if status == .success || message.isEmpty { Mount.exit(withError: error) }  // --help, --version
      writeStandardError("bucketfs: \(message)\(origin(of: message, file: file, commandLine: arguments))\n")
      exit(status.rawValue)
    }
  }

  /// " (key 'K' in FILE)" when the message names an option the file set and the command line did not.
  static func origin(of message: String, file: ConfigFile?, commandLine: [String]) -> String {
    guard let file else { return "" }
    let onCommandLine = EffectiveConfig.given(in: commandLine)
    let named = file.keys.sorted().filter { key in
      onCommandLine[key] == nil && message.contains("--\(key)")
    }
    guard let key = named.first else { return " (with --config \(file.path))" }
    return " (key '\(key)' in \(file.path))"
  }
}

func writeStandardOutput(_ text: String) {
  text.utf8CString.withUnsafeBufferPointer { _ = write(1, $0.baseAddress, $0.count - 1) }
}
