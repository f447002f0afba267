#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Ferry
import FerryMetricSamples
import FerryProtocol
import FerryThreads
import Foundation

/// `ferry top`: a live full-screen view of the agent, refreshed every second.
struct Top: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A live full-screen view of the agent: event rates, queue, sinks (q quits).",
        discussion: """
            Polls the agent's status each interval and shows events per second accepted, blocked, \
            held, suppressed, rejected and duplicate; the queue and its oldest event; held events; \
            per sink its delivery rate, backlog, circuit and dead letters. Rates are the counters' \
            differences between two polls, so the first frame shows "-". Figures the agent does not \
            report (a sink's oldest event; latencies from an agent without metrics) show "-". \
            Press q (or Ctrl-C) to quit. With --once, prints one frame (rates over --interval) and exits.
            """
    )

    @Flag(name: .long, help: "Print one frame and exit (for scripts): two polls --interval apart, no terminal control.")
    var once = false

    @Option(name: .long, help: "Seconds between refreshes.")
    var interval: Double = 1

    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if !(interval >= 0.1 && interval <= 3600) { throw ValidationError("--interval must be between 0.1 and 3600 seconds") }
    }

    func run() throws {
        let runtime = agent.runtimeDirectory
        let poll = { () throws -> TopSample in
            var sample = try TopSample(json: Control.request(.status(), runtimeDirectory: runtime).json, at: .now)
            // The metrics add latencies and connected clients (an agent without the op: "-").
            if let reply = try? Control.request(.metrics(), runtimeDirectory: runtime),
               let object = try? JSONSerialization.jsonObject(with: Data(reply.json)) as? [String: Any],
               let text = object["text"] as? String {
                sample.add(metrics: MetricSamples(parsing: Array(text.utf8)))
            }
            return sample
        }
        let period = Duration.milliseconds(Int(interval * 1000))
        if once {
            let first = try poll()
            Thread.sleep(forTimeInterval: interval)
            let second = try poll()
            let size = Terminal.size() ?? (columns: 80, rows: 24)
            let lines = TopView.frame(current: second, previous: first, width: size.columns, height: size.rows)
            print(lines.dropLast().joined(separator: "\n").trimmingCharacters(in: .newlines))
            return
        }

        let terminal = Terminal.enterFullScreen()
        defer { terminal?.restore() }
        var previous: TopSample?
        var next = ContinuousClock.now
        while true {
            let size = Terminal.size() ?? (columns: 80, rows: 24)
            var lines: [String]
            do {
                let sample = try poll()
                lines = TopView.frame(current: sample, previous: previous, width: size.columns, height: size.rows)
                previous = sample
            } catch {
                // Keep running while the agent restarts; say why there is nothing to show.
                lines = ["ferry top: \(error)", "", "q quit"].map { TopView.fit($0, size.columns) }
                previous = nil
            }
            Terminal.write(terminal == nil ? lines.joined(separator: "\n") + "\n\n"
                : "\u{1B}[H\u{1B}[2J" + lines.joined(separator: "\r\n"))
            next += period
            // Wait for the next refresh, reading keys meanwhile.
            while ContinuousClock.now < next {
                let left = ContinuousClock.now.duration(to: next).components
                let milliseconds = Int32(max(1, left.seconds * 1000 + left.attoseconds / 1_000_000_000_000_000))
                if let key = Terminal.readKey(timeoutMilliseconds: milliseconds),
                   key == UInt8(ascii: "q") || key == UInt8(ascii: "Q") {
                    return
                }
            }
        }
    }
}

/// The terminal for `ferry top`: raw keys (no line buffering, no echo) on the alternate screen,
/// put back as it was on exit and on SIGINT/SIGTERM.
struct Terminal {
    /// The settings to restore; the signal handler reads them, hence a global.
    nonisolated(unsafe) private static var saved = termios()
    nonisolated(unsafe) private static var active = false

    private static let leave = Array("\u{1B}[?25h\u{1B}[?1049l".utf8)

    /// Enters raw mode and the alternate screen when standard input and output are terminals;
    /// returns nil (and changes nothing) otherwise.
    static func enterFullScreen() -> Terminal? {
        guard isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 else { return nil }
        var settings = termios()
        guard tcgetattr(STDIN_FILENO, &settings) == 0 else { return nil }
        saved = settings
        _ = leave.count  // initialised here, not first in the signal handler
        active = true
        // Keys without Enter and without echo; ISIG stays on, so Ctrl-C is SIGINT, handled below.
        settings.c_lflag &= ~tcflag_t(ICANON | ECHO)
        withUnsafeMutableBytes(of: &settings.c_cc) { cc in
            cc[Int(VMIN)] = 0
            cc[Int(VTIME)] = 0
        }
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &settings)
        for signalNumber in [SIGINT, SIGTERM, SIGHUP] {
            signal(signalNumber) { number in
                // Async-signal-safe only: tcsetattr, write, _exit.
                Terminal.restoreFromSignal()
                _exit(128 + number)
            }
        }
        write("\u{1B}[?1049h\u{1B}[?25l")
        return Terminal()
    }

    private static func restoreFromSignal() {
        guard active else { return }
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
        leave.withUnsafeBytes { _ = systemWrite(STDOUT_FILENO, $0.baseAddress, $0.count) }
    }

    /// Leaves the alternate screen and restores the terminal's settings.
    func restore() {
        for signalNumber in [SIGINT, SIGTERM, SIGHUP] { signal(signalNumber, SIG_DFL) }
        Self.restoreFromSignal()
        Self.active = false
    }

    /// Writes `text` to standard output in one go (one frame, one write).
    static func write(_ text: String) {
        writeAll(STDOUT_FILENO, Array(text.utf8))
    }

    /// The terminal's size (TIOCGWINSZ on standard output), read each frame so a resize shows at
    /// the next refresh.
    static func size() -> (columns: Int, rows: Int)? {
        var size = winsize()
        let result = withUnsafeMutablePointer(to: &size) { ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), $0) }
        guard result == 0, size.ws_col > 0, size.ws_row > 0 else { return nil }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    /// One key from standard input, waiting at most `timeoutMilliseconds`; nil on timeout, and
    /// after a plain sleep when standard input is closed or not readable.
    static func readKey(timeoutMilliseconds: Int32) -> UInt8? {
        var descriptor = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, timeoutMilliseconds)
        guard ready > 0 else { return nil }
        if descriptor.revents & Int16(POLLIN) == 0 {
            // Hung up or invalid: stop polling it for this interval.
            usleep(UInt32(timeoutMilliseconds) * 1000)
            return nil
        }
        var byte: UInt8 = 0
        let count = read(STDIN_FILENO, &byte, 1)
        if count == 1 { return byte }
        if count == 0 { usleep(UInt32(timeoutMilliseconds) * 1000) }  // end of input
        return nil
    }
}

/// `write(2)`, named apart from ``Terminal/write(_:)``.
private func systemWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int {
    write(descriptor, buffer, count)
}
