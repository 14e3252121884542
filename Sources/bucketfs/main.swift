// Signals are blocked before any other thread exists, so every thread inherits the mask.
Signals.blockAndWatch()
BucketFSCommand.main()
