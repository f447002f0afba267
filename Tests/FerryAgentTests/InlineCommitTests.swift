@testable import FerryAgent
import FerryProtocol
@testable import FerryStorage
import FerryTestKit
import Testing

/// The commit where the event arrives (``CommitPipeline/Placement``, ``CommitPipeline/commit(_:)``):
/// the arriving thread commits when nobody else is committing and nothing waits; otherwise the
/// commit thread takes the group.
@Suite("Inline commit")
struct InlineCommitTests {
    typealias Placement = CommitPipeline.Placement

    static func inputs(taken: Bool = false, queued: Int = 0, closed: Bool = false, delay: Int = 0) -> Placement.Inputs {
        Placement.Inputs(tokenTaken: taken, queued: queued, closed: closed, commitDelayMicroseconds: delay)
    }

    @Test("the arriving thread commits only with the token free, nothing queued, no commit delay, one message, not stopping")
    func placement() {
        #expect(Placement.decide(Self.inputs()) == .here)
        #expect(Placement.decide(Self.inputs(taken: true)) == .handOff(.committing))
        #expect(Placement.decide(Self.inputs(queued: 1)) == .handOff(.queued))
        #expect(Placement.decide(Self.inputs(delay: 500)) == .handOff(.commitDelay))
        #expect(Placement.decide(Self.inputs(closed: true)) == .handOff(.stopping))
        // A round of several messages is a backlog: the path goes back to reading while the commit
        // thread syncs it.
        var backlog = Self.inputs()
        backlog.messages = 2
        #expect(Placement.decide(backlog) == .handOff(.backlog))
        var planted = Self.inputs()
        planted.acksBeforeSync = true
        #expect(Placement.decide(planted) == .handOff(.plantedAcksBeforeSync))
        // Stopping first (nothing is committed once the pipeline stops), then the configuration.
        #expect(Placement.decide(Self.inputs(taken: true, queued: 3, closed: true, delay: 500)) == .handOff(.stopping))
        #expect(Placement.decide(Self.inputs(taken: true, queued: 3, delay: 500)) == .handOff(.commitDelay))
        #expect(Placement.decide(Self.inputs(taken: true, queued: 3)) == .handOff(.committing))
    }

    @Test("an idle pipeline commits on the calling thread: stored and answered before commit returns; a duplicate too")
    func commitsOnTheCallingThread() async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration())
        let frame = Events.make(1).encoded()
        let first = try harness.commitHere([frame])
        #expect(first.taken == 1)
        #expect(first.answered.flatMap(\.entries).map(\.status) == [.accepted], "answered on this thread: \(first.answered)")
        #expect(try readAll(harness.log).map(\.decodedID) == [Events.id(of: frame)])
        let again = try harness.commitHere([frame])
        #expect(again.answered.flatMap(\.entries).map(\.status) == [.duplicate])
        // Through the commit thread as before: the same group commit, the same answers.
        #expect(try await harness.submit([Events.make(2).encoded()]).map(\.status) == [.accepted])
        #expect(try readAll(harness.log).count == 2)
        await harness.stop()
    }

    @Test("once the pipeline stopped, an arriving message is neither committed nor queued")
    func refusedOnceStopped() async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration())
        await harness.pipeline.stop()
        let result = try harness.commitHere([Events.make(1).encoded()])
        #expect(result.taken == 0 && result.answered.isEmpty)
        #expect(try readAll(harness.log).isEmpty)
        harness.scratch.remove()
    }
}
