import FerryAgent
import FerryProtocol

/// One request's body turned into what the agent is given: a pure function of the bytes and the
/// sender (run on the server's thread pool, never on an event loop).
package enum SegmentRequest {
    /// One message of a request: its event, or why it was refused.
    package enum Message: Sendable, Equatable {
        case event(SegmentEvent)
        case refused(SegmentRefusal)

        /// The message's `messageId`, if readable.
        package var messageID: String? {
            switch self {
            case .event(let event): event.messageID
            case .refused(let refusal): refusal.messageID
            }
        }
    }

    /// What the sender's connection says about it (the kernel's word).
    package struct Peer: Sendable, Hashable {
        package var uid: UInt32?
        package var pid: UInt32
        package init(uid: UInt32?, pid: UInt32) {
            self.uid = uid
            self.pid = pid
        }
    }

    /// The messages of `body` (gzip when `admitted.gzip`) sent to `admitted.endpoint` by
    /// `peer` with `authorization` (the header's value). `writeKeys` names sources by write key;
    /// `now` and `newID` stamp and name messages without a timestamp or `messageId`. A refusal
    /// of the whole request (not JSON, not UTF-8, too large) is a failure; a refused message is
    /// one of the results.
    package static func messages(
        body raw: [UInt8], admitted: IngestVerdict.Admitted, authorization: String?, peer: Peer,
        writeKeys: [String: String], categories: [String: UInt8], typeCategories: [String: String], now: UInt64,
        newID: () -> EventID
    ) -> Result<[Message], IngestRefusal> {
        var body = raw
        if admitted.gzip {
            do {
                body = try BoundedGunzip.inflate(raw, limit: IngestVerdict.maxInflatedBytes)
            } catch {
                switch error {
                case .tooLarge:
                    return .failure(IngestRefusal(413, "too_large", "the gzip body inflates beyond \(IngestVerdict.maxInflatedBytes) bytes"))
                case .corrupt(let why):
                    return .failure(IngestRefusal(400, "invalid_gzip", why))
                }
            }
        }
        guard !body.isEmpty else { return .failure(IngestRefusal(400, "invalid_request", "the body is empty")) }
        guard body.withUnsafeBytes({ UTF8Validation.isValid($0) }) else {
            return .failure(IngestRefusal(400, "invalid_utf8", "the body is not valid UTF-8"))
        }
        let root: BodyValue, tooDeep: [Range<Int>]
        do {
            (root, tooDeep) = try BodyValue.parse(body)
        } catch {
            return .failure(IngestRefusal(400, "invalid_json", "the body is not valid JSON: \(error)"))
        }
        let elements: [BodyValue]
        switch SegmentMapping.messages(of: root, endpoint: admitted.endpoint) {
        case .success(let list): elements = list
        case .failure(let refusal):
            return .failure(IngestRefusal(refusal.reason == .tooLarge ? 413 : 400, refusal.code, refusal.message))
        }
        // Nesting past the limit inside a message refuses that message only (below); anywhere
        // else (the batch's own members) the body as a whole.
        if let outside = tooDeep.first(where: { deep in !elements.contains { $0.range.contains(deep.lowerBound) } }) {
            return .failure(IngestRefusal(400, "invalid_json",
                                          "the body is not valid JSON: nesting deeper than \(JSONTape.maxDepth) at byte \(outside.lowerBound)"))
        }
        let writeKey = SegmentMapping.writeKey(body: root, authorization: authorization)
        let sender = SegmentSender(uid: peer.uid, pid: peer.pid, writeKey: writeKey,
                                   source: writeKeys[writeKey] ?? HTTPIngestConfiguration.defaultSource)
        return .success(elements.map { element -> Message in
            if let deep = tooDeep.first(where: { element.range.contains($0.lowerBound) }) {
                return .refused(SegmentMapping.tooDeep(element, at: deep.lowerBound, sender: sender))
            }
            switch SegmentMapping.event(element, endpoint: admitted.endpoint, sender: sender, categories: categories,
                                        typeCategories: typeCategories, now: now, newID: newID) {
            case .success(let event): return .event(event)
            case .failure(let refusal): return .refused(refusal)
            }
        })
    }
}

