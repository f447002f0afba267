#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CBenchSupport
import FerryProtocol
import Foundation

/// Errors of the harness: a message for the person running it.
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Monotonic nanoseconds.
func nowNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

func seconds(since start: UInt64) -> Double { Double(nowNanoseconds() - start) / 1e9 }

func sleepMicroseconds(_ us: Int) { usleep(useconds_t(max(0, us))) }

/// The shortest sleep of a paced sender: it sleeps at least this long and then sends everything
/// due, so a sender at 30 000 events/s wakes at most 20 000 times a second.
let pacingQuantumNanoseconds: UInt64 = 50_000

/// Sleeps until the monotonic instant `deadline` (nanoseconds). Paced senders sleep instead of
/// spinning: a load generator on the agent's 2 cores must not take the CPU from the agent it
/// measures (4 spinning clients starve ferryd, and the latency measured is the scheduler's).
func sleep(untilNanoseconds deadline: UInt64) {
    var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    #if os(Linux)
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
    #else
    let now = nowNanoseconds()
    if deadline > now { usleep(useconds_t((deadline - now) / 1000)) }
    _ = ts
    #endif
}

/// Makes the calling thread's timed sleeps end within 1 µs of their deadline (Linux's default
/// timer slack of 50 µs would be charged to every paced event's latency). Call it on the thread
/// that paces.
func tightenTimerSlack() {
    _ = bench_set_timer_slack(1_000)
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    let mid = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/// A properties object of exactly `size` bytes (`{"p":"xxx…"}`, at least 8 bytes).
func propertiesJSON(size: Int) -> [UInt8] {
    Array("{\"p\":\"".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: max(0, size - 8)) + Array("\"}".utf8)
}

/// A wire frame for a benchmark event with `bodySize` bytes of properties.
func benchFrame(id: EventID, sequence: UInt64, bodySize: Int, properties: [UInt8]? = nil) -> [UInt8] {
    WireEvent(id: id, timestamp: WallClock.unixMilliseconds(), sequence: sequence, pid: UInt32(getpid()), type: .track,
              source: "bench", name: "bench", properties: properties ?? propertiesJSON(size: bodySize)).encoded()
}

/// Command-line flags as `--name value` pairs plus bare `--switch`es.
struct Flags {
    private var values: [String: String] = [:]
    private var switches: Set<String> = []

    init(_ arguments: ArraySlice<String>) {
        var iterator = arguments.makeIterator()
        var pending: String?
        while let argument = iterator.next() {
            if argument.hasPrefix("--") {
                if let pending { switches.insert(pending) }
                pending = String(argument.dropFirst(2))
            } else if let name = pending {
                values[name] = argument
                pending = nil
            }
        }
        if let pending { switches.insert(pending) }
    }

    func string(_ name: String) throws -> String {
        guard let value = values[name] else { throw BenchError("missing --\(name)") }
        return value
    }
    func string(_ name: String, default value: String) -> String { values[name] ?? value }
    func int(_ name: String) throws -> Int {
        guard let value = Int(try string(name)) else { throw BenchError("--\(name) needs an integer") }
        return value
    }
    func int(_ name: String, default value: Int) -> Int { values[name].flatMap { Int($0) } ?? value }
    func double(_ name: String, default value: Double) -> Double { values[name].flatMap { Double($0) } ?? value }
    func has(_ name: String) -> Bool { switches.contains(name) }
}

/// Child-side protocol: print `ready`, wait for `go` on stdin, work, print one JSON line.
enum ChildProtocol {
    static func ready() {
        print("ready")
        fflush(nil)
        _ = readLine()
    }

    static func finish(_ result: [String: Any]) {
        let data = try! JSONSerialization.data(withJSONObject: result, options: [.sortedKeys])
        print(String(decoding: data, as: UTF8.self))
        fflush(nil)
    }
}

/// A child process started by the driver, spoken to through stdin/stdout lines.
final class Child {
    let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var buffer: [UInt8] = []

    init(_ executable: String, _ arguments: [String], environment: [String: String] = [:], stderrPath: String? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.standardInput = input
        process.standardOutput = output
        if let stderrPath {
            FileManager.default.createFile(atPath: stderrPath, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: stderrPath)
        }
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// The next line of the child's stdout (blocking), or nil at end of file.
    func readLine() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            let data = output.fileHandleForReading.availableData
            if data.isEmpty { return nil }
            buffer += data
        }
    }

    func expectReady() throws {
        guard readLine() == "ready" else { throw BenchError("\(process.executableURL!.path) did not become ready") }
    }

    func go() { input.fileHandleForWriting.write(Data("go\n".utf8)) }

    /// The child's JSON result line.
    func result() throws -> [String: Any] {
        while let line = readLine() {
            if line.hasPrefix("{"), let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] {
                return object
            }
        }
        throw BenchError("\(process.executableURL!.path) ended without a result")
    }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    func wait() { process.waitUntilExit() }
}

/// Peak and current resident set size of a process, in KiB, from /proc.
func memoryKiB(pid: Int32) -> (hwm: Int, rss: Int) {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Int {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return 0 }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0
    }
    return (field("VmHWM"), field("VmRSS"))
}

func removeTree(_ path: String) { try? FileManager.default.removeItem(atPath: path) }

func makeDirectory(_ path: String) throws {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
}
