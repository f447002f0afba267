import FerryIntegrationKit
import FerryTestKit
import Foundation

/// The embedded file sink (`"type": "file"`) writing JSON Lines into a directory of the test.
///
/// Its transient fault, `output-not-a-directory`, replaces the output directory by a regular
/// file (a failing disk seen by every write: `open` fails with `ENOTDIR`, even for root), and puts
/// the directory back to clear it. It has no permanent fault: a file sink never refuses events.
public struct FileSinkFixture: SinkFixture {
    public let name = "file"
    /// The file sink's own points (docs/FAULTS.md): a file opened (its files roll at 1 KiB, so
    /// every batch after the first opens a new one), a batch written to it, and synced.
    public let crashPoints = ["sink.file.opened", "sink.file.written", "sink.file.synced"]
    public let faults = [SinkFault("output-not-a-directory", .retried)]

    /// The fixture.
    public init() {}

    public func makeUpstream(in directory: TemporaryDirectory) async throws -> any SinkUpstream {
        Upstream(directory: directory.appending("out"))
    }

    struct Upstream: SinkUpstream {
        let directory: String
        var aside: String { directory + ".aside" }

        var sinkKeys: String { #""type": "file", "directory": "\#(directory)", "maxFileBytes": 1024"# }

        func delivered() async throws -> [DeliveredRecord] {
            try lines().filter { $0["erased"] as? Bool != true }.map { DeliveredRecord(name: $0["name"] as? String ?? "", object: $0) }
        }

        /// Every line, erased ones included.
        private func lines() throws -> [[String: Any]] {
            // While the fault lasts the lines are in the directory set aside.
            let path = FileManager.default.fileExists(atPath: aside) ? aside : directory
            return try deliveredEventObjects(in: path)
        }

        var erasureKeys: String { "" }
        var erasureDeletes: Bool { true }

        func erasures(of user: String) async throws -> Int {
            let lines = try lines()
            guard !lines.contains(where: { $0["user_id"] as? String == user }) else { return 0 }
            return Set(lines.filter { $0["erased"] as? Bool == true }.compactMap { $0["erasure"] as? String }).count
        }

        func inject(_ fault: SinkFault) async throws {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try FileManager.default.moveItem(atPath: directory, toPath: aside)
            try writeText("not a directory\n", to: directory)
        }

        func clear(_ fault: SinkFault) async throws {
            try FileManager.default.removeItem(atPath: directory)
            try FileManager.default.moveItem(atPath: aside, toPath: directory)
        }

        func shutdown() async {}
    }
}
