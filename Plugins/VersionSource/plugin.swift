import PackagePlugin

/// Makes `Version.current` (CloudStorage) from the file VERSION at the
/// package's root: the one place the version is written. A build step, not
/// a fetched tool, so a clean clone builds offline; the source is made
/// again whenever VERSION changes.
@main
struct VersionSource: BuildToolPlugin {
  func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
    let version = context.package.directoryURL.appending(path: "VERSION")
    let source = context.pluginWorkDirectoryURL.appending(path: "BuildVersion.swift")
    return [
      .buildCommand(
        displayName: "Version.current from VERSION",
        executable: try context.tool(named: "VersionSourceTool").url,
        arguments: [version.path(), source.path()], inputFiles: [version], outputFiles: [source])
    ]
  }
}
