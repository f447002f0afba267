// A driver for counting what FerryClient.track() costs on the app's thread with callgrind or
// memcheck (instruction and allocation counts repeat under load where wall-clock times do not):
// N calls of `track("Order Completed", properties: ["total": 42.5, "sku": "A-1"])` (or without
// properties) against no agent, so the outbox fills and then drops its oldest event per call, as
// in ClientCost's "agent down" case. Run through scripts/callgrind-track, which differences two N.
//
// Usage: track-cost N [props|none] [RUNTIME-DIR]
#if canImport(Glibc)
import Glibc
#endif
import Ferry
import FerryProtocol
import Logging

let arguments = CommandLine.arguments
guard arguments.count >= 2, let count = Int(arguments[1]) else {
    print("usage: track-cost N [props|none] [RUNTIME-DIR]")
    exit(64)
}
let withProperties = arguments.count < 3 || arguments[2] != "none"
let runtime = arguments.count >= 4 ? arguments[3] : "/nonexistent/track-cost-no-agent"
var logger = Logger(label: "track-cost")
logger.logLevel = .critical
let client = try FerryClient(configuration: FerryClientConfiguration(source: "bench", runtimeDirectory: runtime), logger: logger)
var last = EventID.zero
if withProperties {
    for _ in 0..<count { last = client.track("Order Completed", properties: ["total": 42.5, "sku": "A-1"]) }
} else {
    for _ in 0..<count { last = client.track("Order Completed") }
}
await client.shutdown()
print("tracked \(count), last id \(last)")
