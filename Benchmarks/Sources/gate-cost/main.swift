// A driver for counting what the quality gate (FerryQuality: redaction, then the tracking plan)
// costs per event with callgrind: N judgements of the 256-byte event scripts/callgrind-ingest
// sends (`{"plan":"pro","pad":"x…"}`, name "python example", source "ferry_emit.py"), against a
// 20-event plan that names it and a redactor with all five detectors. Run through
// scripts/callgrind-gate, which differences two N so that start-up and compilation cancel out.
//
// Usage: gate-cost N [judge|frame|stage|none]
//   judge  QualityGate.judge on a decoded WireEvent (the gate alone)
//   frame  the frame decoded, judged, and re-encoded when redaction changed it (the gate as an
//          ingest stage that starts from the frame)
//   stage  what the agent's quality stage does with the frame (its header already read by the
//          limits stage): `passesUntouched` from the frame's bytes in place, and only when that
//          says no, decode, judge, re-encode when redacted
//   none   the frame decoded only (to subtract from `frame`)
// Env: EVENT=rich judges a planned event of the usual shape instead (pattern, number bound, enum,
//      date-time format and strings with digits the detectors look at in its properties; a user
//      id, an anonymous id and a Segment library's context), 20-event plan and detectors the same.
#if canImport(Glibc)
import Glibc
#endif
import FerryProtocol
import FerryQuality

let arguments = CommandLine.arguments
guard arguments.count >= 2, let count = Int(arguments[1]) else {
    print("usage: gate-cost N [judge|frame|stage|none]")
    exit(64)
}
let mode = arguments.count >= 3 ? arguments[2] : "judge"

// 20 planned events: the benchmark's own and 19 others of the usual shapes.
var events: [String] = [
    #"{"type": "track", "name": "python example", "properties": {"type": "object", "required": ["plan"], "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}, "pad": {"type": "string", "maxLength": 200}}}}"#,
]
for index in 1..<17 {
    events.append(#"{"type": "track", "name": "Event \#(index)", "properties": {"required": ["id", "total"], "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{4,8}$"}, "total": {"type": "number", "minimum": 0}, "currency": {"enum": ["EUR", "USD"]}, "at": {"format": "date-time"}}, "additionalProperties": false}}"#)
}
events.append(#"{"type": "identify", "traits": {"properties": {"email": {"type": "string", "pattern": "^hmac:"}}}}"#)
events.append(#"{"type": "page", "properties": {"required": ["path"]}}"#)
events.append(#"{"type": "group", "traits": {"properties": {"size": {"type": "integer", "minimum": 1}}}}"#)
let planJSON = #"{"events": [\#(events.joined(separator: ","))]}"#
let redactJSON = #"{"detect": [{"kind": "email", "action": "hash"}, {"kind": "phone", "action": "mask"}, {"kind": "ip", "action": "mask"}, {"kind": "card", "action": "mask"}, {"kind": "iban", "action": "hash"}]}"#

let gate: QualityGate
do {
    let plan = try TrackingPlan(json: Array(planJSON.utf8), source: "gate-cost plan")
    let redactor = try Redactor(configuration: try RedactionConfiguration(json: Array(redactJSON.utf8)),
                                key: [UInt8](repeating: 0x5A, count: 32))
    gate = QualityGate(plan: plan, allowUnplanned: false, redactor: redactor)
} catch {
    print("gate-cost: \(error)")
    exit(1)
}

// The event of scripts/callgrind-ingest, padded to a 256-byte frame.
func makeEvent(pad: Int) -> WireEvent {
    WireEvent(id: EventID(high: 0x0190_0000_0000_7000, low: 0x8000_0000_0000_0001), timestamp: 1_700_000_000_000, sequence: 1,
              pid: 4242, type: .track, source: "ferry_emit.py", name: "python example",
              properties: Array(#"{"plan":"pro","pad":"\#(String(repeating: "x", count: pad))"}"#.utf8))
}
let event: WireEvent
if let chosen = getenv("EVENT"), String(cString: chosen) == "rich" {
    event = WireEvent(id: EventID(high: 0x0190_0000_0000_7000, low: 0x8000_0000_0000_0001), timestamp: 1_700_000_000_000, sequence: 1,
                      pid: 4242, type: .track, source: "app.py", name: "Event 1", userID: "user-8412",
                      properties: Array(#"{"id":"AB-12345","total":129.95,"currency":"EUR","at":"2026-11-27T10:00:00Z"}"#.utf8),
                      anonymousID: "0190b3c4-2f1e-7a3b-9c4d-5e6f7a8b9c0d",
                      context: Array(#"{"library":{"name":"analytics-python","version":"2.3.2"},"locale":"en-US","timezone":"Europe/Berlin"}"#.utf8))
} else {
    var pad = 100
    while makeEvent(pad: pad).encoded().count < 256 { pad += 1 }
    event = makeEvent(pad: pad)
    precondition(event.encoded().count == 256, "frame is \(event.encoded().count) bytes")
}
let frame = event.encoded()
precondition(gate.judge(event).violations.isEmpty && !gate.judge(event).redacted, "the benchmark event must pass untouched")

let header = try! EventHeader(frame)
precondition(gate.passesUntouched(frame: frame, header: header), "the benchmark event must pass the stage's shortcut")

var violations = 0, redacted = 0, bytes = 0
for _ in 0..<count {
    switch mode {
    case "judge":
        let judgement = gate.judge(event)
        violations += judgement.violations.count
        if judgement.redacted { redacted += 1 }
    case "frame":
        let decoded = try! WireEvent(decoding: frame)
        let judgement = gate.judge(decoded)
        violations += judgement.violations.count
        if judgement.redacted { bytes += judgement.event.encoded().count; redacted += 1 }
    case "stage":
        if gate.passesUntouched(frame: frame, header: header) {
            bytes += frame.count
        } else {
            let judgement = gate.judge(try! WireEvent(decoding: frame))
            violations += judgement.violations.count
            if judgement.redacted { bytes += judgement.event.encoded().count; redacted += 1 }
        }
    default:
        let decoded = try! WireEvent(decoding: frame)
        bytes += decoded.properties.count
    }
}
print("gate-cost \(mode) events=\(count) frame=\(frame.count) violations=\(violations) redacted=\(redacted) bytes=\(bytes)")
