import Foundation
import FerryAgent
import FerryProtocol
import FerryStorage

/// The JSON request bodies of the HTTP sink (documented in `docs/HTTP-SINK.md`).
///
/// `envelope` — Ferry's own shape; each event is the object the file sink writes per line
/// (``JSONWriter/storedEventObject(_:)``):
///
/// ```json
/// {"version":2,"batch_id":"<idempotency key>","sent_at":1714564800000,
///  "consent":{"ad_personalization":"unset","ad_storage":"granted","anonymous_id":"…","consent_seq":3,…},
///  "events":[{"id":"…","type":"track","name":"Signed Up","source":"web","pid":42,"seq":7,
///             "timestamp":1714564799000,"accepted_at":1714564799001,"user_id":"u1",
///             "properties":{"plan":"pro"}}]}
/// ```
///
/// `segment` — a batch for Segment's `/v1/batch` (the event's own context is merged into each
/// message's `context`; see ``segmentEvent(_:)`` and ``segmentPlan(_:maxMessageBytes:maxBatchBytes:)``):
///
/// ```json
/// {"batch":[{"messageId":"…","type":"track","event":"Signed Up","userId":"u1",
///            "timestamp":"2024-05-01T11:59:59.000Z","properties":{"plan":"pro"},
///            "context":{"ferry":{"source":"web","accepted_at":1714564799001}}}],
///  "sentAt":"2024-05-01T12:00:00.000Z","context":{"consent":{"ad_personalization":"unset",…,"consent_seq":3,…}}}
/// ```
///
/// Both carry the consent stamp written by ``ConsentStampStyle`` (docs/PROTOCOL.md, "Consent
/// stamp"), byte for byte what the file sink and JetStream write; body version 1
/// (`bodyVersion: 1`) writes the stamp as before (`consent_seq` a string, `ads_personalization`)
/// and no `version`.
enum HTTPBatchBody {
    /// The body of `batch` in `format` and body version `version`, sent at `sentAt` (ms since the
    /// epoch). The batch's ``DeliveryBatch/disclosure`` says what it carries about the host and
    /// the process; without one, the format's default (``defaultDisclosure(_:)``).
    static func encode(_ batch: DeliveryBatch, format: HTTPSinkConfiguration.BodyFormat,
                       version: Int = HTTPSinkConfiguration.currentBodyVersion, sentAt: UInt64) -> [UInt8] {
        switch format {
        case .envelope: envelope(batch, version: version, sentAt: sentAt)
        case .segment: segment(batch, version: version, sentAt: sentAt)
        }
    }

    /// What a body of `format` carries when the sink's `disclose` says nothing: everything in
    /// `envelope` (the operator's own collector), nothing about the host or the process in
    /// `segment` (a third party).
    static func defaultDisclosure(_ format: HTTPSinkConfiguration.BodyFormat) -> Disclosure {
        format == .segment ? .minimal : .all
    }

    static func envelope(_ batch: DeliveryBatch, version: Int = HTTPSinkConfiguration.currentBodyVersion, sentAt: UInt64) -> [UInt8] {
        var json = JSONWriter()
        // From body version 2 on the envelope says its version first (absent: 1).
        if version >= 2 { json.field("version", UInt64(version)) }
        json.field("batch_id", batch.idempotencyKey)
        json.field("sent_at", sentAt)
        json.rawField("consent", consentObject(batch.consent, version: version))
        json.storedEventsField("events", batch.events, disclosure: batch.disclosure ?? defaultDisclosure(.envelope))
        return json.finish()
    }

    static func segment(_ batch: DeliveryBatch, version: Int = HTTPSinkConfiguration.currentBodyVersion, sentAt: UInt64) -> [UInt8] {
        let disclosure = batch.disclosure ?? defaultDisclosure(.segment)
        let fallback = fallbackAnonymousID(batch, disclosure: disclosure)
        return segment(messages: batch.events.map { stored in
            segmentEvent(stored, event: (try? stored.decoded()).map { withAnonymousID($0, fallback) }, disclosure: disclosure)
        }, consent: batch.consent, version: version, sentAt: sentAt)
    }

    /// The anonymous id an event with neither a user id nor an anonymous id is sent with: the
    /// agent's own (the consent stamp's `anonymous_id`), unless `disclose.anonymousId` is off.
    /// Segment refuses a message without one of the two.
    static func fallbackAnonymousID(_ batch: DeliveryBatch, disclosure: Disclosure) -> String {
        disclosure.anonymousID ? batch.consent["anonymous_id"] ?? "" : ""
    }

    /// `event` with `fallback` as its anonymous id when it has neither a user id nor an
    /// anonymous id of its own (nor the agent's, for its consent events).
    static func withAnonymousID(_ event: WireEvent, _ fallback: String) -> WireEvent {
        guard !fallback.isEmpty, event.userID.isEmpty, agentAnonymousID(event).isEmpty else { return event }
        var event = event
        event.anonymousID = fallback
        return event
    }

    /// The segment body holding `messages` (each from ``segmentEvent(_:)``).
    static func segment(messages: [[UInt8]], consent: [String: String], version: Int = HTTPSinkConfiguration.currentBodyVersion,
                        sentAt: UInt64) -> [UInt8] {
        var json = JSONWriter()
        json.rawField("batch", array(messages))
        json.field("sentAt", CivilTime.iso8601(milliseconds: sentAt))
        var context = JSONWriter()
        context.rawField("consent", consentObject(consent, version: version))
        json.rawField("context", context.finish())
        return json.finish()
    }

    // MARK: Segment's limits

    /// Segment's limit for one message in a batch ("32 KB"), counted as the bytes of the
    /// message's JSON; taken as 32,000 so it holds whether the collector means 1000 or 1024.
    static let segmentMaxMessageBytes = 32_000
    /// Segment's limit for one `/v1/batch` request body ("500 KB"), uncompressed; 500,000 for the
    /// same reason.
    static let segmentMaxBatchBytes = 500_000

    /// How a batch goes out in `segment` format: the events Segment can never accept, and the
    /// rest cut into parts (in order) whose bodies each fit ``segmentMaxBatchBytes``.
    struct SegmentPlan: Sendable {
        var rejections: [SinkRejection]
        var parts: [DeliveryBatch]
        /// The messages of each part (``segmentEvent(_:disclosure:)`` of its events), encoded
        /// once: part `i`'s body is ``segment(messages:consent:version:sentAt:)`` of `messages[i]`.
        var messages: [[[UInt8]]]
    }

    /// Checks every event of `batch` against Segment's rules and cuts the rest into parts that
    /// fit. The cut depends on the events and the consent stamp only (`sentAt` always has the
    /// same length), so the same events give the same parts on every attempt.
    static func segmentPlan(_ batch: DeliveryBatch, version: Int = HTTPSinkConfiguration.currentBodyVersion,
                            maxMessageBytes: Int = segmentMaxMessageBytes, maxBatchBytes: Int = segmentMaxBatchBytes) -> SegmentPlan {
        // The body around the messages: `{"batch":[` … `],"sentAt":"…","context":{…}}`.
        let overhead = segment(messages: [], consent: batch.consent, version: version, sentAt: 0).count
        var plan = SegmentPlan(rejections: [], parts: [], messages: [])
        var part: [StoredEvent] = [], messages: [[UInt8]] = []
        var size = overhead
        let disclosure = batch.disclosure ?? defaultDisclosure(.segment)
        let fallback = fallbackAnonymousID(batch, disclosure: disclosure)
        for stored in batch.events {
            // Decoded once for both the message and Segment's rules.
            let event = (try? stored.decoded()).map { withAnonymousID($0, fallback) }
            let message = segmentEvent(stored, event: event, disclosure: disclosure)
            if let reason = segmentRejection(stored, event: event, messageBytes: message.count, maxMessageBytes: maxMessageBytes) {
                plan.rejections.append(SinkRejection(event: stored, reason: reason))
                continue
            }
            let added = message.count + (part.isEmpty ? 0 : 1)  // the comma between messages
            if !part.isEmpty && size + added > maxBatchBytes {
                plan.parts.append(batch.with(events: part))
                plan.messages.append(messages)
                part = []
                messages = []
                size = overhead
            }
            size += message.count + (part.isEmpty ? 0 : 1)
            part.append(stored)
            messages.append(message)
        }
        if !part.isEmpty {
            plan.parts.append(batch.with(events: part))
            plan.messages.append(messages)
        }
        return plan
    }

    /// Whether `a` and `b` hold the same events (the same records, frames and metadata), consent
    /// stamp and disclosure: a plan made for one is the plan of the other. Frames shared by both
    /// batches compare at once (same storage).
    static func sameBatch(_ a: DeliveryBatch, _ b: DeliveryBatch) -> Bool {
        guard a.events.count == b.events.count, a.consent == b.consent, a.disclosure == b.disclosure else { return false }
        return zip(a.events, b.events).allSatisfy { x, y in
            x.position == y.position && x.size == y.size && x.acceptedAt == y.acceptedAt && x.kind == y.kind
                && x.frame == y.frame && x.metadata == y.metadata
        }
    }

    /// Why Segment would refuse `stored` for good (its message being `messageBytes` long), or
    /// `nil`: every message needs a `userId` or an `anonymousId`, a `track` needs an `event`
    /// name, a `group` a `groupId`, an `alias` a `previousId` and a `userId`, and a message may
    /// be at most `maxMessageBytes`.
    static func segmentRejection(_ stored: StoredEvent, messageBytes: Int, maxMessageBytes: Int = segmentMaxMessageBytes) -> String? {
        segmentRejection(stored, event: try? stored.decoded(), messageBytes: messageBytes, maxMessageBytes: maxMessageBytes)
    }

    /// ``segmentRejection(_:messageBytes:maxMessageBytes:)`` for `stored` already decoded into
    /// `event` (`nil`: it cannot be decoded).
    static func segmentRejection(_ stored: StoredEvent, event: WireEvent?, messageBytes: Int,
                                 maxMessageBytes: Int = segmentMaxMessageBytes) -> String? {
        guard let event else {
            return "segment: the stored event \(stored.decodedID) cannot be decoded"
        }
        if event.userID.isEmpty && agentAnonymousID(event).isEmpty {
            let article = event.type == .identify || event.type == .alias ? "an" : "a"
            return "segment: \(article) \(event.type) message needs a userId or an anonymousId; the event has neither"
        }
        switch event.type {
        case .track where event.name.isEmpty:
            return "segment: a track message needs an event name; the event's name is empty"
        case .group where event.groupID.isEmpty:
            return "segment: a group message needs a groupId; the event has none"
        case .alias where event.previousID.isEmpty || event.userID.isEmpty:
            return "segment: an alias message needs a previousId and a userId; the event lacks \(event.previousID.isEmpty ? "previousId" : "userId")"
        default:
            break
        }
        if messageBytes > maxMessageBytes {
            return "segment: the message is \(messageBytes) bytes, over Segment's limit of \(maxMessageBytes) bytes per message"
        }
        return nil
    }

    /// One Segment message: `track` names go to `event`, `page`/`screen` names to `name`;
    /// `identify`/`group` properties are `traits`; `userId`, `anonymousId`, `groupId`,
    /// `previousId` when set; the event's own context object (without the keys of
    /// ``Disclosure/dropContext``) is the message's `context`, with Ferry's fields under
    /// `context.ferry` (replacing a `ferry` key the client sent): `pid` and `seq` only when
    /// `disclosure` says ``Disclosure/process``, `origin` only when it says ``Disclosure/origin``.
    static func segmentEvent(_ stored: StoredEvent, disclosure: Disclosure = .minimal) -> [UInt8] {
        segmentEvent(stored, event: try? stored.decoded(), disclosure: disclosure)
    }

    /// ``segmentEvent(_:disclosure:)`` for `stored` already decoded into `event` (`nil`: it
    /// cannot be decoded). Nested objects are written in place, with field names as literals.
    static func segmentEvent(_ stored: StoredEvent, event: WireEvent?, disclosure: Disclosure) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(stored.frame.count + 256)
        var json = JSONWriter(appendingTo: &out)
        guard let event else {
            json.field("messageId", stored.decodedID)
            json.objectField("context") { context in
                context.objectField("ferry") { ferry in ferry.field("undecodable", true) }
            }
            json.finish(into: &out)
            return out
        }
        // The app's own messageId when it sent one (the local HTTP API keeps it with the event),
        // so Segment deduplicates the app's retries and Ferry's as one; else Ferry's event id.
        if let messageID = event.messageID { json.field("messageId", messageID) } else { json.field("messageId", event.id) }
        json.field("type", event.type.description)
        switch event.type {
        case .track: json.field("event", event.name)
        case .page, .screen: json.field("name", event.name)
        case .identify, .group, .alias: if !event.name.isEmpty { json.field("name", event.name) }
        }
        if !event.userID.isEmpty { json.field("userId", event.userID) }
        let anonymousID = agentAnonymousID(event)
        if !anonymousID.isEmpty { json.field("anonymousId", anonymousID) }
        if !event.groupID.isEmpty { json.field("groupId", event.groupID) }
        if !event.previousID.isEmpty { json.field("previousId", event.previousID) }
        json.rawField("timestamp") { out in
            out.append(UInt8(ascii: "\""))
            CivilTime.appendISO8601(milliseconds: event.timestamp, to: &out)
            out.append(UInt8(ascii: "\""))
        }
        let propertiesKey: StaticString = event.type == .identify || event.type == .group ? "traits" : "properties"
        var rawProperties: String?
        // Segment's alias has neither properties nor traits: its properties, if any, go to
        // context.ferry.properties.
        var aliasProperties: [UInt8]?
        if event.type == .alias {
            if JSONWriter.isJSONObject(event.properties) {
                if !isEmptyObject(event.properties) { aliasProperties = JSONWriter.compactJSON(event.properties) }
            } else if !event.properties.isEmpty {
                rawProperties = String(decoding: event.properties, as: UTF8.self)
            }
        } else if event.properties.isEmpty {
            json.rawField(propertiesKey, Array("{}".utf8))
        } else if JSONWriter.isJSONObject(event.properties) {
            json.compactObjectField(propertiesKey, event.properties)
        } else {
            json.rawField(propertiesKey, Array("{}".utf8))
            rawProperties = String(decoding: event.properties, as: UTF8.self)
        }
        func ferryMembers(_ ferry: inout JSONWriter) {
            ferry.field("source", event.source)
            // Left out when not known: pid 0 (a TCP sender of the HTTP API), seq 0 (events of
            // the HTTP API have no client sequence).
            if disclosure.process && event.pid != 0 { ferry.field("pid", UInt64(event.pid)) }
            if disclosure.process && event.sequence != 0 { ferry.field("seq", event.sequence) }
            ferry.field("accepted_at", stored.acceptedAt)
            if event.messageID != nil { ferry.field("id", event.id) }
            if event.category != 0 { ferry.field("category", UInt64(event.category)) }
            if !event.onceKey.isEmpty { ferry.field("once_key", event.onceKey) }
            if event.flags.contains(.localOnly) { ferry.field("local_only", true) }
            if let rawProperties { ferry.field("properties_raw", rawProperties) }
            if let aliasProperties { ferry.rawField("properties", aliasProperties) }
            if disclosure.origin, let origin = EventOrigin(metadata: stored.metadata) {
                ferry.rawField("origin", JSONWriter.originObject(origin))
            }
        }
        let context = disclosure.filteredContext(event.context)
        if context.isEmpty {
            // The common case, `"context":{"ferry":{…}}`, written in place.
            json.objectField("context") { object in object.objectField("ferry", members: ferryMembers) }
        } else {
            var ferry = JSONWriter()
            ferryMembers(&ferry)
            json.rawField("context", mergedContext(context, ferry: &ferry))
        }
        json.finish(into: &out)
        return out
    }

    /// The event's `anonymousId`; for the agent's own `consent_updated` events (category
    /// `consent`, source `ferryd`) queued by a release before they carried one, the agent's
    /// anonymous id from their properties (`anonymous_id`), so they are never refused for lack of
    /// a user.
    static func agentAnonymousID(_ event: WireEvent) -> String {
        guard event.anonymousID.isEmpty, event.userID.isEmpty, event.category == ConsentCategories.consentCode,
              event.source == "ferryd",
              let properties = try? JSONSerialization.jsonObject(with: Data(event.properties)) as? [String: Any],
              let id = properties["anonymous_id"] as? String else { return event.anonymousID }
        return id
    }

    /// Whether `json` (a JSON object) has no members.
    static func isEmptyObject(_ json: [UInt8]) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any])?.isEmpty ?? false
    }

    /// The event's context object with `"ferry": <Ferry's fields>` added (a client's own `ferry`
    /// key is replaced). A context that is not a JSON object (the agent refuses those at ingest)
    /// goes to `context.ferry.context_raw` instead.
    static func mergedContext(_ context: [UInt8], ferry: inout JSONWriter) -> [UInt8] {
        guard !context.isEmpty else {
            var out = JSONWriter()
            out.rawField("ferry", ferry.finish())
            return out.finish()
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(context)) as? [String: Any] else {
            ferry.field("context_raw", String(decoding: context, as: UTF8.self))
            var out = JSONWriter()
            out.rawField("ferry", ferry.finish())
            return out.finish()
        }
        var text = JSONWriter.compactJSON(context)
        if object["ferry"] != nil {
            // Rare: re-encode without the client's key (numbers keep their value, not always their spelling).
            var rest = object
            rest["ferry"] = nil
            text = (try? JSONSerialization.data(withJSONObject: rest, options: [.sortedKeys, .withoutEscapingSlashes])).map(Array.init) ?? Array("{}".utf8)
        }
        // Splice `"ferry":{…}` in before the closing brace.
        while let last = text.last, last != UInt8(ascii: "}") { text.removeLast() }
        text.removeLast()
        let isEmpty = object.count == (object["ferry"] == nil ? 0 : 1)
        return text + (isEmpty ? [] : [UInt8(ascii: ",")]) + Array(#""ferry":"#.utf8) + ferry.finish() + [UInt8(ascii: "}")]
    }

    /// The consent stamp as a JSON object with sorted keys (`{}` without one), in the style of
    /// body version `version`.
    static func consentObject(_ consent: [String: String], version: Int = HTTPSinkConfiguration.currentBodyVersion) -> [UInt8] {
        (version >= 2 ? ConsentStampStyle.current : .original).json(consent)
    }

    private static func array(_ elements: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        out.reserveCapacity(elements.reduce(2) { $0 + $1.count + 1 })
        for (index, element) in elements.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out += element
        }
        out.append(UInt8(ascii: "]"))
        return out
    }
}
