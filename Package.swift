// swift-tools-version: 6.0
import PackageDescription

// Linux only: the code imports Glibc and links libfuse3 (the low-level API),
// so no Apple platform is declared.
let package = Package(
  name: "bucketfs",
  products: [
    .executable(name: "bucketfs", targets: ["bucketfs"])
  ],
  dependencies: [
    .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
    // Already in the graph through async-http-client: the Tracing API the FUSE layer and the
    // client instrument with (no exporter package: OTLPExport speaks OTLP/HTTP JSON itself).
    .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.3.0"),
    .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
    .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
    .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
  ],
  targets: [
    // The only C: what Swift cannot import from libfuse3 (macros, the INIT reply flag fix)
    // and from glibc (mallopt's parameter macros).
    .target(
      name: "CFuse",
      linkerSettings: [.linkedLibrary("fuse3")]
    ),
    // Swift face of libfuse3's low-level API. Knows nothing of Cloud Storage.
    .target(
      name: "FUSE",
      dependencies: [
        "CFuse", .product(name: "Logging", package: "swift-log"),
        .product(name: "CoreMetrics", package: "swift-metrics"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "Tracing", package: "swift-distributed-tracing"),
      ]
    ),
    // The storage model and protocol the filesystem is written against.
    // Object bytes travel as NIO ByteBuffers from the socket to the FUSE reply, uncopied.
    .target(name: "ObjectStore", dependencies: ["CCRC32C", .product(name: "NIOCore", package: "swift-nio")]),
    // CRC-32C with the CPU's crc32 instruction (SSE4.2) when it has one.
    .target(name: "CCRC32C"),
    // Threads for blocking file work, off Swift's concurrency pool.
    .target(name: "IOThreads", dependencies: [.product(name: "NIOPosix", package: "swift-nio")]),
    // The persistent read cache: object bytes kept on local disk by bucket,
    // name and generation, wrapped around the client as an ObjectStore.
    .target(
      name: "ContentCache",
      dependencies: [
        "IOThreads", "ObjectStore", .product(name: "CoreMetrics", package: "swift-metrics"),
        .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"),
      ]
    ),
    // Where the service is and how a request proves who sends it: the
    // endpoint and the access-token protocol, shared by the client and the
    // credential providers (so neither depends on the other).
    .target(name: "ServiceAccess"),
    // RFC 3339 times: the metadata's, and the token endpoints' expiries.
    .target(name: "TimeFormats"),
    // JSON's string escaping, for the JSON written by hand (log lines, OTLP, the fake).
    .target(name: "JSONText"),
    // Which CA certificates a mount trusts (--ca-file, SSL_CERT_FILE/DIR) and
    // what a refused certificate or failed handshake says, for the client and
    // the token endpoints alike.
    .target(
      name: "TLSTrust",
      dependencies: [
        .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
      ]
    ),
    // Cloud Storage JSON API client. Knows nothing of FUSE.
    .target(
      name: "CloudStorage",
      dependencies: [
        "ObjectStore", "ServiceAccess", "TLSTrust",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "CoreMetrics", package: "swift-metrics"),
        .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "Tracing", package: "swift-distributed-tracing"),
      ],
      // Version.current, from the file VERSION.
      plugins: ["VersionSource"]
    ),
    // Writes Version.current from VERSION at build time: the version is kept in that one file,
    // which scripts/install.sh reads too.
    .plugin(name: "VersionSource", capability: .buildTool(), dependencies: ["VersionSourceTool"]),
    .executableTarget(name: "VersionSourceTool", path: "Plugins/VersionSourceTool"),
    // OAuth access tokens: service-account keys, authorized-user files, the
    // gcloud application-default file, the metadata server, static tokens.
    .target(
      name: "Credentials",
      dependencies: [
        "ServiceAccess", "TLSTrust", "TimeFormats",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "_CryptoExtras", package: "swift-crypto"),
      ]
    ),
    // The filesystem: names, inodes, listing, attributes, xattrs, reads.
    .target(
      name: "BucketFS",
      dependencies: [
        "FUSE", "IOThreads", "ObjectStore", "TimeFormats", .product(name: "Logging", package: "swift-log"),
        .product(name: "CoreMetrics", package: "swift-metrics"),
        .product(name: "NIOCore", package: "swift-nio"),
      ]
    ),
    // Prometheus text at /metrics over a small HTTP/1 server, and the
    // swift-metrics factory the libraries' counters report to.
    .target(
      name: "MetricsExport",
      dependencies: [
        .product(name: "CoreMetrics", package: "swift-metrics"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "Prometheus", package: "swift-prometheus"),
      ]
    ),
    // Finished spans batched and sent as OTLP/HTTP JSON (POST {endpoint}/v1/traces), a
    // Tracer installed only when an OTLP endpoint is configured; the metrics pushed
    // to {endpoint}/v1/metrics from a swift-metrics backend of its own.
    .target(
      name: "OTLPExport",
      dependencies: [
        "JSONText",
        .product(name: "CoreMetrics", package: "swift-metrics"),
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "Tracing", package: "swift-distributed-tracing"),
      ]
    ),
    // The options of `bucketfs mount` (name, default, meaning): the CLI's
    // ArgumentParser options and README's options table are built from it.
    .target(name: "MountOptionTable"),
    .executableTarget(
      name: "bucketfs",
      dependencies: [
        "BucketFS", "CFuse", "CloudStorage", "ContentCache", "Credentials", "FUSE", "IOThreads", "JSONText",
        "MetricsExport",
        "MountOptionTable",
        "ObjectStore", "ServiceAccess", "TLSTrust", "OTLPExport",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Logging", package: "swift-log"),
        // `--config FILE`: YAML.
        .product(name: "Yams", package: "Yams"),
      ]
    ),
    // Reproduces a Swift 6.3.1 -O miscompile (tuple results split across an
    // await) and checks the shapes the code uses instead; run on the release build.
    .executableTarget(name: "ToolchainCheck", path: "Tests/ToolchainCheck"),
    // An exact, in-process model of the service, and an HTTP front for it.
    .target(
      name: "StorageFake",
      dependencies: [
        "JSONText", "ObjectStore",
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
      ],
      path: "Tests/StorageFake"
    ),
    .testTarget(
      name: "BucketFSTests",
      dependencies: [
        "BucketFS", "CloudStorage", "FUSE", "IOThreads", "ObjectStore", "ServiceAccess", "StorageFake",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "MetricsTestKit", package: "swift-metrics"),
        .product(name: "NIOCore", package: "swift-nio"),
      ]
    ),
    .testTarget(
      name: "CloudStorageTests",
      dependencies: [
        "CloudStorage", "ObjectStore", "ServiceAccess", "StorageFake",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "MetricsTestKit", package: "swift-metrics"),
      ]
    ),
    .testTarget(
      name: "MetricsExportTests",
      dependencies: [
        "MetricsExport",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "CoreMetrics", package: "swift-metrics"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
      ]
    ),
    .testTarget(
      name: "OTLPExportTests",
      dependencies: [
        "OTLPExport",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "Tracing", package: "swift-distributed-tracing"),
      ]
    ),
    .testTarget(
      name: "MountOptionTableTests",
      dependencies: ["MountOptionTable", "BucketFS", "CloudStorage", "ServiceAccess"]),
    .testTarget(
      name: "ContentCacheTests",
      dependencies: [
        "ContentCache", "IOThreads", "ObjectStore", "StorageFake",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "MetricsTestKit", package: "swift-metrics"),
        .product(name: "NIOCore", package: "swift-nio"),
      ]
    ),
    .testTarget(
      name: "TLSTrustTests",
      dependencies: ["TLSTrust", .product(name: "NIOSSL", package: "swift-nio-ssl")]),
    .testTarget(name: "StorageFakeTests", dependencies: ["StorageFake", "ObjectStore"]),
    .testTarget(
      name: "CredentialsTests",
      dependencies: [
        "Credentials", "CloudStorage", "ObjectStore", "ServiceAccess", "StorageFake",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "_CryptoExtras", package: "swift-crypto"),
      ]
    ),
  ]
)
