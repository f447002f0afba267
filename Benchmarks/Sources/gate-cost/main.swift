// A driver for counting what the quality gate (FerryQuality: redaction, then the tracking plan)
// costs per event with callgrind: N judgements of the 256-byte event scripts/callgrind-ingest
// sends (`{"plan":"pro","pad":"x…"}`, name "python example", source "ferry_emit.py"), against a
// 20-event plan that names it and a redactor with all five detectors. Run through
// scripts/callgrind-gate, which differences two N so that start-up and compilation cancel out.
//
// Usage: gate-cost N [judge|frame|stage|none|cold|cold-none|trace]
//   judge  QualityGate.judge on a decoded WireEvent (the gate alone)
//   frame  the frame decoded, judged, and re-encoded when redaction changed it (the gate as an
//          ingest stage that starts from the frame)
//   stage  what the agent's quality stage does with the frame (its header already read by the
//          limits stage): `passesUntouched` from the frame's bytes in place, and only when that
//          says no, decode, judge, re-encode when redacted
//   none   the frame decoded only (to subtract from `frame`)
//   cold   N rounds of `stage` timed on the clock, each after the caches were evicted and the
//          thread slept as at a trickle, and again at once (warm); `cold-none` times nothing,
//          the floor; `trace` one judgement for lackey (all three: scripts/gate-trickle)
// Env: GATE=plan (no redactor) or GATE=detect (no plan) judges with half of the gate.
//      EVENT=rich judges a planned event of the usual shape instead (pattern, number bound, enum,
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
    switch getenv("GATE").map({ String(cString: $0) }) ?? "both" {
    case "plan": gate = QualityGate(plan: plan, allowUnplanned: false, redactor: nil)
    case "detect": gate = QualityGate(plan: nil, allowUnplanned: true, redactor: redactor)
    default: gate = QualityGate(plan: plan, allowUnplanned: false, redactor: redactor)
    }
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

/// Nanoseconds on the monotonic clock.
func now() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// An opaque write, for `trace`: the compiler can move no memory access across it.
@_optimize(none) @inline(never) func touch(_ pointer: UnsafeMutablePointer<UInt64>) { pointer.pointee &+= 1 }

/// An integer from the environment, or `fallback`.
func setting(_ name: String, _ fallback: Int) -> Int {
    getenv(name).flatMap { Int(String(cString: $0)) } ?? fallback
}

switch mode {
case "trace":
    // One judgement of the stage (`passesUntouched`, after one to initialise what is lazy)
    // between two writes to a marker whose addresses are printed first: under
    // `valgrind --tool=lackey --trace-mem=yes` the accesses between them are the judgement's own
    // (scripts/gate-trickle counts the lines and pages they touch).
    let marker = UnsafeMutablePointer<UInt64>.allocate(capacity: 16)
    marker.initialize(repeating: 0, count: 16)
    print("marker \(UInt(bitPattern: marker)) \(UInt(bitPattern: marker + 8))")
    _ = gate.passesUntouched(frame: frame, header: header)
    touch(marker)
    let passed = gate.passesUntouched(frame: frame, header: header)
    touch(marker + 8)
    print("gate-cost trace passed=\(passed)")
    exit(0)
case "cold", "cold-none":
    // What the stage costs an event that comes alone, as at a trickle: before each round the
    // thread writes through THRASH_MIB MiB (default 64, evicting the data caches) and sleeps
    // PAUSE_US µs (default 10 000, ferryd's ingest thread between events at 100/s); then it
    // times one judgement (cold) and the same judgement again at once (warm). `cold-none`
    // times nothing between the clock reads: the floor to subtract.
    let thrash = setting("THRASH_MIB", 64) << 20, pause = setting("PAUSE_US", 10_000)
    var scratch = [UInt8](repeating: 0, count: max(thrash, 1))
    var cold: [UInt64] = [], warm: [UInt64] = [], passed = 0
    let judging = mode == "cold"
    for round in 0..<count {
        for index in stride(from: 0, to: thrash, by: 64) { scratch[index] &+= UInt8(truncatingIfNeeded: round) }
        if pause > 0 { usleep(UInt32(pause)) }
        let start = now()
        if judging { passed += gate.passesUntouched(frame: frame, header: header) ? 1 : 0 }
        let middle = now()
        if judging { passed += gate.passesUntouched(frame: frame, header: header) ? 1 : 0 }
        let end = now()
        cold.append(middle - start)
        warm.append(end - middle)
    }
    func quartiles(_ values: [UInt64]) -> String {
        let sorted = values.sorted()
        return "p25=\(sorted[sorted.count / 4]) p50=\(sorted[sorted.count / 2]) p75=\(sorted[sorted.count * 3 / 4])"
    }
    print("gate-cost \(mode) rounds=\(count) passed=\(passed) cold_ns \(quartiles(cold)) warm_ns \(quartiles(warm)) (\(scratch[0]))")
    exit(0)
default:
    break
}

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
