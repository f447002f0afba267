import FerryProtocol
import FerryStorage

/// One stage of the ingest chain between a path's event frames and the commit (``IngestStages``):
/// a value behind this protocol, listed once in ``IngestStages/chain(limits:quality:)`` —
/// ``LimitsStage`` first, then the ``QualityStage`` when a plan or redaction is configured.
///
/// A stage judges one event at a time on the thread that read it (a path's socket thread or
/// pool thread): pure but for its metrics, never blocking, `Sendable`.
protocol IngestStage: Sendable {
    /// What becomes of `event`, which every stage before this one passed: nil passes it on as it
    /// is (the common case: no copy of its frame); an item ends the chain for it (refused,
    /// quarantined), except a changed ``IngestBatch/Item/event(_:frame:)`` (a redacted event),
    /// which the next stages judge in its place.
    func check(_ event: IngestEvent, metrics: AgentMetrics) -> IngestBatch.Item?
}

/// The stages of each event, in order: the limits first, then the quality stage when there is
/// one. Built by ``IngestStages/chain(limits:quality:)``, the one list of them. Each is held as
/// its own type and called directly, not through an array of `any IngestStage`: the chain is
/// known, and a dynamic call per event (the existential's copy, retain and witness) cost ~150
/// instructions per event on the ingest path (issue 37). A new stage is a new field here and a
/// line in ``IngestStages/item(_:version:chain:)``.
struct IngestChain: Sendable {
    /// The first stage.
    let limits: LimitsStage
    /// The quality stage (redaction, then the plan), nil when neither is configured.
    let quality: QualityStage?

    /// A chain of `limits`, then `quality` when there is one.
    init(limits: LimitsStage, quality: QualityStage?) {
        self.limits = limits
        self.quality = quality
    }
}

/// One event frame on its way through the ingest chain. Trivially copied but for its frame (no
/// error value in it: a stage passes it by reference to a witness and copies it freely).
struct IngestEvent {
    /// The event frame as it is now (as received, or as a stage before changed it).
    let frame: [UInt8]
    /// The protocol version of the message that carried it (the HTTP API's: the newest).
    let version: UInt8
    /// Its fixed header, decoded once as the chain starts; nil when it does not decode
    /// (``headerRefusal`` says why).
    let header: EventHeader?
    /// Why the fixed header does not decode (`.none` when it does).
    let headerRefusal: RejectReason

    /// `frame` of a message in protocol `version`, its fixed header decoded.
    @inline(__always)
    init(frame: [UInt8], version: UInt8) {
        self.frame = frame
        self.version = version
        do {
            header = try EventHeader(frame)
            headerRefusal = .none
        } catch {
            header = nil
            headerRefusal = error.rejectReason
        }
    }

    /// A changed event whose header a stage already checked.
    @inline(__always)
    init(frame: [UInt8], version: UInt8, header: EventHeader) {
        self.frame = frame
        self.version = version
        self.header = header
        headerRefusal = .none
    }
}

/// The limits every event frame meets (`maxEventBytes`, a fixed header that decodes, known flags,
/// no extension block from a protocol 1 sender): the first stage of the chain.
struct LimitsStage: IngestStage {
    /// The largest event frame stored (`maxEventBytes`).
    let maxEventBytes: Int

    /// The limits of `maxEventBytes`.
    init(maxEventBytes: Int) {
        self.maxEventBytes = maxEventBytes
    }

    /// Refused with its ack entry: too large (only its fixed header is kept), a fixed header that
    /// does not decode, the extension block from a protocol 1 sender (who cannot have meant it),
    /// or a flag this agent does not know (it may carry a promise the agent cannot keep, as
    /// `localOnly` does: refused like an unknown critical extension). Else passed on.
    @inline(__always)
    func check(_ event: IngestEvent, metrics: AgentMetrics) -> IngestBatch.Item? {
        let frame = event.frame
        if frame.count > maxEventBytes {
            let id = frame.count >= 16 ? EventID(bytes: frame) : .zero
            return .refused(AckEntry(id: id, status: .rejected, reason: .tooLarge), frame: Array(frame.prefix(WireEvent.fixedHeaderSize)))
        }
        guard let header = event.header else {
            let id = frame.count >= 16 ? EventID(bytes: frame) : .zero
            return .refused(AckEntry(id: id, status: .rejected, reason: event.headerRefusal), frame: frame)
        }
        guard event.version >= 2 || !header.flags.contains(.extended) else {
            return .refused(AckEntry(id: header.id, status: .rejected, reason: .malformed), frame: frame)
        }
        guard header.flags.isSubset(of: .known) else {
            return .refused(AckEntry(id: header.id, status: .rejected, reason: .unsupportedField), frame: frame)
        }
        return nil
    }
}

/// The quality stage (redaction, then the tracking plan) as a stage of the chain: an event the
/// gate passes untouched, judged in place from its bytes, goes on as it came; any other is
/// decoded and judged (``QualityStage/judged(_:frame:metrics:)``).
extension QualityStage: IngestStage {
    @inline(__always)
    func check(_ event: IngestEvent, metrics: AgentMetrics) -> IngestBatch.Item? {
        guard let header = event.header, !passesUntouched(header, frame: event.frame) else { return nil }
        return judged(header, frame: event.frame, metrics: metrics)
    }
}
