// Signals are blocked before any other thread exists, so every thread inherits the mask.
Signals.blockAndWatch()
let arguments = Array(CommandLine.arguments.dropFirst())
if ConfiguredMount.applies(to: arguments) {
  ConfiguredMount.main(Array(arguments.dropFirst()))
}
BucketFSCommand.main()
