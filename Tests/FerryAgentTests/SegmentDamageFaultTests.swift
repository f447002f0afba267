@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// Fault injection on the durable log: torn writes (a range overwritten with zeros or garbage, a
/// tail cut off) and bit flips at seeded random offsets of random segments. For each damaged log
/// the test works out from the bytes which records were hit, then checks that recovery keeps
/// every other record (and only those), reports the damage exactly, that the real `ferry queue
/// inspect` lists the same damaged regions, and now and then that the real `ferryd` starts on
/// the damaged directory and delivers exactly the surviving events.
///
/// CI: 120 logs; `FERRY_SOAK=1`: 3000. `FERRY_FAULT_SEED` repeats a run.
@Suite("Faults: torn writes and bit flips in segments", .serialized)
struct SegmentDamageFaultTests {
    /// One record as written.
    struct Written {
        var segment: UInt64
        var offset: Int64
        var size: Int64
        var id: EventID
        var end: Int64 { offset + size }
    }

    /// What a fault did to one segment file.
    struct SegmentDamage {
        /// Byte offsets whose value changed.
        var changed: Set<Int64> = []
        /// The file's new length, if the tail was cut off.
        var cutAt: Int64?
    }

    /// What a record became.
    enum Fate { case intact, damaged, gone }

    /// A region the scanner must report: `offset` and `length` within `segment`.
    struct Region: Hashable, CustomStringConvertible {
        var segment: UInt64
        var offset: Int64
        var length: Int64
        var description: String { "\(segment):\(offset)+\(length)" }
    }

    @Test("recovery loses exactly the damaged records, reports them, and ferry queue inspect lists the same regions")
    func randomDamage() async throws {
        let iterations = FaultSettings.scale(ci: 120, soak: 3000)
        var random = FaultSettings.generator(for: "segment damage (\(iterations) logs)")
        let started = ContinuousClock.now
        var totals = (written: 0, lost: 0, regions: 0, truncated: 0, flips: 0, overwrites: 0, cuts: 0, inspected: 0, agents: 0)

        for iteration in 1...iterations {
            let scratch = try ScratchDirectory(short: true)
            defer { scratch.remove() }
            let data = scratch.appending("data"), directory = data + "/segments"
            let segmentMaxBytes = Int64.random(in: 4096...12_288, using: &random)
            let frames = (1...Int.random(in: 5...90, using: &random)).map {
                Events.make(UInt64($0), padding: Int.random(in: 0...400, using: &random)).encoded()
            }
            try writeLog(directory, frames, segmentMaxBytes: segmentMaxBytes, groupSize: Int.random(in: 1...16, using: &random))
            let written = try readAll(try openLog(directory, segmentMaxBytes: segmentMaxBytes).log).map {
                Written(segment: $0.position.segment, offset: $0.position.offset, size: Int64($0.size), id: $0.decodedID)
            }
            try #require(written.map(\.id) == idsOf(frames))
            let files = segmentFiles(directory)
            let indices = files.map { UInt64($0.split(separator: "/").last!.dropLast(4))! }

            // Damage: one to three faults on random segments (records only, not the 16-byte header).
            var damage: [UInt64: SegmentDamage] = [:]
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let which = Int.random(in: 0..<files.count, using: &random)
                let path = files[which], index = indices[which]
                var bytes = try readBytes(path)
                guard bytes.count > Int(SegmentedLog.segmentHeaderSize) else { continue }
                let before = bytes
                let fault = Int.random(in: 0..<10, using: &random)
                if fault < 4 {
                    // Bit flips.
                    totals.flips += 1
                    for _ in 0..<Int.random(in: 1...4, using: &random) {
                        let at = Int.random(in: Int(SegmentedLog.segmentHeaderSize)..<bytes.count, using: &random)
                        bytes[at] ^= UInt8(1) << UInt8.random(in: 0...7, using: &random)
                    }
                } else if fault < 7 || which != files.count - 1 {
                    // A torn write inside the file: a range overwritten with zeros or garbage.
                    totals.overwrites += 1
                    let at = Int.random(in: Int(SegmentedLog.segmentHeaderSize)..<bytes.count, using: &random)
                    let length = min(Int.random(in: 1...700, using: &random), bytes.count - at)
                    let zeros = Bool.random(using: &random)
                    for i in at..<(at + length) { bytes[i] = zeros ? 0 : UInt8.random(in: 0...255, using: &random) }
                } else {
                    // A torn tail of the last segment: the end of the file never made it.
                    totals.cuts += 1
                    let cut = Int.random(in: Int(SegmentedLog.segmentHeaderSize)..<bytes.count, using: &random)
                    bytes.removeLast(bytes.count - cut)
                    damage[index, default: SegmentDamage()].cutAt = min(damage[index]?.cutAt ?? Int64(cut), Int64(cut))
                }
                for i in 0..<min(before.count, bytes.count) where before[i] != bytes[i] {
                    damage[index, default: SegmentDamage()].changed.insert(Int64(i))
                }
                try writeBytes(bytes, to: path)
            }

            // What must survive, and what must be reported.
            func fate(_ record: Written) -> Fate {
                guard let hit = damage[record.segment] else { return .intact }
                if let cut = hit.cutAt, record.end > cut { return record.offset >= cut ? .gone : .damaged }
                return hit.changed.contains(where: { $0 >= record.offset && $0 < record.end }) ? .damaged : .intact
            }
            let fates = written.map(fate)
            let intact = zip(written, fates).filter { $0.1 == .intact }.map(\.0)
            var regions: [Region] = []
            for (index, path) in zip(indices, files) {
                let inSegment = zip(written, fates).filter { $0.0.segment == index }
                let fileEnd = fileSize(path)
                var runStart: Int64?
                for (record, fate) in inSegment {
                    switch fate {
                    case .damaged: if runStart == nil { runStart = record.offset }
                    case .intact:
                        if let start = runStart { regions.append(Region(segment: index, offset: start, length: record.offset - start)) }
                        runStart = nil
                    case .gone: break
                    }
                }
                if let start = runStart { regions.append(Region(segment: index, offset: start, length: fileEnd - start)) }
            }
            let lastIndex = indices.last!
            let tail = regions.last.flatMap { region in
                region.segment == lastIndex && region.offset + region.length == fileSize(files.last!) ? region : nil
            }
            let context = "iteration \(iteration): \(written.count) records in \(files.count) segments, damage \(damage.mapValues { ($0.changed.sorted().prefix(8), $0.cutAt) }), expected regions \(regions)"

            // The real CLI first (read-only: it reports a torn tail as damage, it does not cut it).
            if !FaultSettings.isSoak || iteration % 10 == 1 {
                totals.inspected += 1
                let inspect = try await runCLI(["queue", "inspect", "--json", "--data-dir", data])
                #expect(inspect.status == (regions.isEmpty ? .exited(0) : .exited(1)), "\(context)\n\(inspect)")
                let document = try #require(try JSONSerialization.jsonObject(with: Data(inspect.stdout.utf8)) as? [String: Any],
                                            "\(context)\n\(inspect)")
                #expect(document["records"] as? Int == intact.count, "\(context)\n\(inspect.stdout)")
                #expect(document["damaged_regions"] as? Int == regions.count, "\(context)\n\(inspect.stdout)")
                let reported = (document["segments"] as? [[String: Any]] ?? []).flatMap { segment -> [Region] in
                    let index = UInt64((segment["file"] as? String ?? "").dropLast(4)) ?? 0
                    return (segment["damage"] as? [[String: Any]] ?? []).map {
                        Region(segment: index, offset: Int64($0["offset"] as? Int ?? -1), length: Int64($0["length"] as? Int ?? -1))
                    }
                }
                #expect(reported == regions, "\(context)\n\(inspect.stdout)")
            }

            // Recovery (in-process): only the damaged records are lost, and the report says so.
            let opened = try openLog(directory, segmentMaxBytes: segmentMaxBytes)
            #expect(opened.report.records == intact.count, "\(context)")
            #expect(opened.report.corruptRegions == regions.count - (tail == nil ? 0 : 1), "\(context) report \(opened.report)")
            #expect(opened.report.truncatedBytes == (tail?.length ?? 0), "\(context) report \(opened.report)")
            #expect(opened.report.corruptBytes == regions.filter { $0 != tail }.reduce(0) { $0 + $1.length }, "\(context) report \(opened.report)")
            #expect(opened.report.isClean == regions.isEmpty, "\(context) report \(opened.report)")
            #expect(opened.seeded.map(\.id) == intact.map(\.id), "\(context)")
            #expect(try readAll(opened.log).map(\.decodedID) == intact.map(\.id), "\(context)")
            #expect(try readAll(opened.log, maxEvents: 3, maxBytes: 512).map(\.decodedID) == intact.map(\.id), "\(context)")
            totals.written += written.count
            totals.lost += fates.filter { $0 == .damaged }.count
            totals.truncated += fates.filter { $0 == .gone }.count
            totals.regions += regions.count

            // Now and then the real agent on the damaged directory: it starts, and delivers the
            // survivors exactly (recovery above already cut any torn tail; the rest it skips).
            if iteration % FaultSettings.scale(ci: 30, soak: 100) == 0 {
                totals.agents += 1
                let agent = try AgentProcess(dataDirectory: data, runtimeDirectory: scratch.appending("rt"),
                                             logDirectory: scratch.appending("logs"))
                defer { agent.cleanup() }
                try await agent.waitUntilReady()
                let delivered = try await waitForValue("the survivors delivered (\(context))", timeout: .seconds(30)) { () -> [DeliveredEvent]? in
                    let events = try agent.deliveredEvents()
                    return events.count >= intact.count ? events : nil
                }
                #expect(delivered.map(\.id) == intact.map(\.id.description), "\(context)")
                let status = try await agent.status()
                let recovery = status.object["recovery"] as? [String: Any]
                #expect((recovery?["corrupt_regions"] as? Int) == regions.count - (tail == nil ? 0 : 1), "\(status)")
                try await agent.terminate()
            }
        }
        print("[fault] segment damage: \(iterations) logs, \(totals.written) records written; faults: \(totals.flips) bit-flip sets, \(totals.overwrites) torn overwrites, \(totals.cuts) torn tails; lost \(totals.lost) damaged records + \(totals.truncated) cut off, in \(totals.regions) regions; \(totals.inspected) `ferry queue inspect` runs, \(totals.agents) ferryd starts; \(ContinuousClock.now - started)")
    }
}
