#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Durability bugs planted on purpose, so the power-cut explorer can show that it catches them
/// (`scripts/powercut --plant NAME`, docs/FAULTS.md section 8). Off unless the environment variable
/// `FERRY_TEST_PLANT_BUG` names one; nothing else reads it.
package enum PlantedBug: String, Sendable, CaseIterable {
    /// ``LogWriter`` does not fsync the segment directory after creating a segment.
    case noDirFsyncOnSegmentCreate = "no-dir-fsync-on-segment-create"
    /// ``FileIO/writeAtomically(_:to:)`` (and the consent journal's own write) renames the temp
    /// file over the target, and fsyncs the directory, before fsyncing the temp file.
    case renameBeforeFsync = "rename-before-fsync"
    /// The commit pipeline sends a group's acks before the group's `fdatasync`.
    case ackBeforeFdatasync = "ack-before-fdatasync"

    /// The bug planted in this process, if any (read once).
    package static let active: PlantedBug? = getenv("FERRY_TEST_PLANT_BUG").flatMap { PlantedBug(rawValue: String(cString: $0)) }
}
