#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

// ferry-bench: Ferry's benchmark harness. `ferry-bench run` is the driver (use scripts/bench);
// the other subcommands are the processes it launches.
let arguments = CommandLine.arguments
let command = arguments.count > 1 ? arguments[1] : "help"
let flags = Flags(arguments.dropFirst(2))
do {
    switch command {
    case "run":
        var driver = try Driver(flags)
        try driver.run()
    case "client": try await runFerryClient(flags)
    case "zmq-push": try runZMQPush(flags)
    case "zmq-pull": try runZMQPull(flags)
    case "sqlite-server": try runSQLiteServer(flags)
    case "latency": try runLatencyClient(flags)
    case "track-latency": try await runTrackLatencyClient(flags)
    case "js-publish": try await runJetStreamPublisher(flags)
    case "generate":
        try generateLog(directory: flags.string("dir"), events: flags.int("events"), bodySize: flags.int("size", default: 64))
    default:
        print("""
        usage: ferry-bench run --ferryd PATH [--quick] [--out FILE] [--work DIR] [--client-cost FILE] [--callgrind-ingest FILE] [--nginx PATH]
               (internal) client | zmq-push | zmq-pull | sqlite-server | latency | track-latency | js-publish | generate
        """)
    }
} catch {
    FileHandle.standardError.write(Data("ferry-bench \(command): \(error)\n".utf8))
    exit(1)
}
