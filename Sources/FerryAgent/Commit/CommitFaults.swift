import FerryStorage

/// Test-only deviations of the commit pipeline, fixed where the agent builds it: the power-cut
/// explorer's planted bugs (docs/FAULTS.md section 8) reach the pipeline as this value, never as a
/// process-wide check on the commit path.
struct CommitFaults: Equatable, Sendable {
    /// Hand a group's acks to their destinations before the log's `fdatasync` (the planted
    /// `ack-before-fdatasync` bug: an acked event can be lost to a power cut).
    var acksBeforeSync = false

    /// No fault: what every agent runs with unless a test plants one.
    static let none = CommitFaults()

    /// The faults ``PlantedBug/active`` names (from `FERRY_TEST_PLANT_BUG`), for the agent to
    /// give its pipeline.
    static var planted: CommitFaults {
        CommitFaults(acksBeforeSync: PlantedBug.active == .ackBeforeFdatasync)
    }
}
