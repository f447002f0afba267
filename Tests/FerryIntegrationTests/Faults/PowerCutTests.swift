import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// Fault injection: power cuts (docs/FAULTS.md section 8). Runs the crash-state explorer
/// (`Tests/Support/powercut/powercut.py`, also `scripts/powercut`) against the built `ferryd`: it
/// records the agent's file-system operations under a workload through an LD_PRELOAD shim, builds
/// the disk states a power cut could leave, restarts `ferryd` on each and checks that every acked
/// event is delivered exactly once. With a bug planted on purpose it must report lost events.
@Suite("Faults: power cut", .serialized)
struct PowerCutTests {
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let explorer = repository.appendingPathComponent("Tests/Support/powercut/powercut.py").path
    static let shimSource = repository.appendingPathComponent("Tests/Support/fsrecord/fsrecord.c").path
    /// Debian's interpreter, which has python3-zmq (scripts/install-deps installs it).
    static let python = "/usr/bin/python3"

    static var available: Bool {
        FileManager.default.isExecutableFile(atPath: python) && FileManager.default.isExecutableFile(atPath: "/usr/bin/cc")
    }

    /// The figures of the explorer's last line (`states=N lost=L …`).
    struct Figures: CustomStringConvertible {
        var values: [String: Int] = [:]
        init(_ output: String) {
            guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("states=") }) else { return }
            for pair in line.split(separator: " ") {
                let parts = pair.split(separator: "=")
                if parts.count == 2, let value = Int(parts[1]) { values[String(parts[0])] = value }
            }
        }
        subscript(_ key: String) -> Int { values[key] ?? -1 }
        var description: String { values.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
    }

    /// Compiles the shim into `directory`.
    static func buildShim(in directory: TemporaryDirectory) async throws -> String {
        let output = directory.appending("fsrecord.so")
        let result = try await runProcess("/usr/bin/cc", ["-shared", "-fPIC", "-O2", "-o", output, shimSource, "-ldl", "-lpthread"])
        try #require(result.status == .exited(0), "cc failed: \(result)")
        return output
    }

    /// Runs the explorer over `states` crash states and returns its figures.
    static func explore(states: Int, plant: String? = nil, timeout: Duration) async throws -> (Figures, CommandResult) {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let shim = try await buildShim(in: dir)
        let seed = FaultSettings.seed()
        var arguments = [explorer, String(states), "--ferryd", try FerryBinaries.ferryd(), "--shim", shim,
                         "--seed", "0x" + String(seed, radix: 16)]
        if let plant { arguments += ["--plant", plant, "--expect-loss"] }
        let result = try await runProcess(python, arguments, timeout: timeout)
        for line in result.stderr.split(separator: "\n") where line.hasPrefix("[powercut] ") && !line.contains("] state ") {
            print("[fault] power cut\(plant.map { " (planted: \($0))" } ?? ""): " + line.dropFirst(11))
        }
        return (Figures(result.stdout), result)
    }

    @Test("after a power cut at any point, every acked event is delivered exactly once and nothing refused is",
          .enabled(if: available, "needs /usr/bin/python3 (python3-zmq) and cc"))
    func ackedMeansDurable() async throws {
        let states = FaultSettings.scale(ci: 60, soak: 3000)
        let (figures, result) = try await Self.explore(states: states, timeout: FaultSettings.scale(ci: .seconds(300), soak: .seconds(7200)))
        print("[fault] power cut: \(figures)")
        #expect(result.status == .exited(0), "\(result)")
        #expect(figures["states"] == states, "\(result)")
        #expect(figures["lost"] == 0 && figures["duplicated"] == 0, "\(result)")
        #expect(figures["refused_delivered"] == 0 && figures["unrecoverable"] == 0, "\(result)")
    }

    @Test("the explorer finds each planted durability bug (it reports lost > 0)",
          .enabled(if: available, "needs /usr/bin/python3 (python3-zmq) and cc"),
          arguments: ["no-dir-fsync-on-segment-create", "rename-before-fsync", "ack-before-fdatasync"])
    func findsPlantedBug(_ bug: String) async throws {
        // The explorer stops at the first state that loses an acked event.
        let (figures, result) = try await Self.explore(states: 300, plant: bug, timeout: .seconds(300))
        print("[fault] power cut (planted: \(bug)): \(figures)")
        #expect(result.status == .exited(0), "\(result)")
        #expect(figures["lost"] > 0, "\(result)")
    }
}
