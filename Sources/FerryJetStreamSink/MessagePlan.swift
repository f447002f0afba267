import FerryProtocol

/// How one delivery batch is cut into NATS messages when several events share a message
/// (``JetStreamSinkConfiguration/eventsPerMessage`` above 1): each message is a run of
/// consecutive events of the batch with the same subject, at most `eventsPerMessage` of them and
/// at most `maxBytes` of body (an event larger than that alone is a message of its own).
///
/// Exactly-once in the stream rests on the server's duplicate window, keyed by `Nats-Msg-Id`: a
/// message re-published after a crash must carry the same events under the same id. The cut of a
/// batch depends on what the batch holds, and a batch read again after a restart can hold more
/// events (more were committed since) or fewer (consent now blocks some), so the sink records the
/// plan durably before publishing (``MessagePlanJournal``) and a re-sent batch follows the
/// recorded plan for as long as the plan still matches it (``make(ids:subjects:sizes:limits:recorded:)``).
///
/// A pure value: planning reads nothing and writes nothing.
struct MessagePlan: Sendable, Hashable {
    /// One message: which events of the batch, and a fingerprint of their ids.
    struct Message: Sendable, Hashable {
        /// The id of the message's first event.
        var firstID: EventID
        /// How many events the message carries.
        var count: Int
        /// CRC32C of the 16-byte ids of the message's events, in order: two plans agree on a
        /// message only when they carry the very same events.
        var digest: UInt32

        /// The message's `Nats-Msg-Id`: the event id for a message of one event (the id a
        /// one-event-per-message sink sends too), otherwise the first event's id and the count.
        var messageID: String {
            count == 1 ? firstID.description : "\(firstID)+\(count)"
        }
    }

    /// The bounds of a message.
    struct Limits: Sendable, Hashable {
        /// Most events in one message.
        var eventsPerMessage: Int
        /// Most body bytes in one message (the events' bodies and the newline between them).
        var maxBytes: Int
    }

    /// The messages, in batch order; their counts add up to the batch's size.
    var messages: [Message]
    /// How many leading messages were taken from the recorded plan (for logs and tests).
    var reused: Int

    /// The plan for a batch whose events have ids `ids`, subjects `subjects` and body sizes
    /// `sizes` (equal lengths). While the batch starts with the messages of `recorded` (the plan
    /// recorded for an earlier attempt at the same place, the very same events each), those are
    /// kept; from the first message that no longer matches (or when the batch is shorter than the
    /// recording) the rest is cut anew.
    static func make(ids: [EventID], subjects: [String], sizes: [Int], limits: Limits, recorded: [Message]) -> MessagePlan {
        precondition(ids.count == subjects.count && ids.count == sizes.count, "one subject and one size per event")
        var messages: [Message] = []
        var start = 0
        // The recorded prefix.
        for message in recorded {
            let end = start + message.count
            guard end <= ids.count, ids[start] == message.firstID, digest(ids[start..<end]) == message.digest,
                  // A recorded message never mixes subjects; a batch whose subjects changed (a
                  // reload of the template) is cut anew from here.
                  subjects[start..<end].allSatisfy({ $0 == subjects[start] }) else { break }
            messages.append(message)
            start = end
        }
        let reused = messages.count
        // The rest: greedy runs of one subject within the limits.
        while start < ids.count {
            var end = start + 1
            var bytes = sizes[start]
            while end < ids.count, end - start < limits.eventsPerMessage, subjects[end] == subjects[start],
                  bytes + 1 + sizes[end] <= limits.maxBytes {
                bytes += 1 + sizes[end]
                end += 1
            }
            messages.append(Message(firstID: ids[start], count: end - start, digest: digest(ids[start..<end])))
            start = end
        }
        return MessagePlan(messages: messages, reused: reused)
    }

    /// The index ranges of the batch's events, one per message.
    var ranges: [Range<Int>] {
        var start = 0
        return messages.map { message in
            defer { start += message.count }
            return start..<(start + message.count)
        }
    }

    /// Whether any message carries more than one event (only such a plan needs recording: a
    /// message of one event is keyed by that event's id whatever the cut).
    var combinesEvents: Bool { messages.contains { $0.count > 1 } }

    /// CRC32C of the ids' 16-byte big-endian forms, in order.
    static func digest(_ ids: ArraySlice<EventID>) -> UInt32 {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(ids.count * 16)
        for id in ids { id.append(to: &bytes) }
        return CRC32C.checksum(bytes)
    }
}
