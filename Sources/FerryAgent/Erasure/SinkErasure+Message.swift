import FerryProtocol

extension SinkErasure {
    /// The erasure message the HTTP sink (`envelope`) and the JetStream sink send upstream:
    /// `{"id":…,"requestedAt":…,"type":"erasure","userId":…}` (`requestedAt` in Unix ms; docs/
    /// HTTP-SINK.md and docs/JETSTREAM.md, "Erasure").
    package var message: [UInt8] {
        var out: [UInt8] = Array(#"{"id":"#.utf8)
        JSONText.appendString(id, to: &out)
        out += Array(#","requestedAt":\#(requestedAt),"type":"erasure","userId":"#.utf8)
        JSONText.appendString(userID, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
