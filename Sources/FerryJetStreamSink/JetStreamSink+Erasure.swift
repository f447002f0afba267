import FerryAgent
import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import NATS

// The JetStream sink's erasure (docs/JETSTREAM.md, "Erasure"): an erasure message on
// `erasure.subject`, and, when the subject template carries the user (`{user}`), a purge of the
// user's subjects from the stream.

extension JetStreamSink {
    /// Purges the user's subjects (``SubjectTemplate/userFilter(_:)``) from the stream, then
    /// publishes the erasure message `{"id":…,"requestedAt":…,"type":"erasure","userId":…}` to
    /// `erasure.subject` with `Nats-Msg-Id: erasure-<id>` and waits for its PubAck. Either may be
    /// left out by the configuration, not both (a permanent failure: nothing to erase with).
    /// Returns the PubAck's stream sequence (`"seq <n>"`) when a message was published.
    public func erase(_ request: SinkErasure) async throws -> String? {
        let template: SubjectTemplate
        switch self.template {
        case .success(let parsed): template = parsed
        case .failure(let error): throw SinkError(.permanent, "jetstream: subjectTemplate: \(error.message)")
        }
        let filter = template.userFilter(request.userID)
        guard filter != nil || configuration.erasureSubject != nil else {
            throw SinkError(.permanent, "jetstream: neither erasure.subject nor a {user} in subjectTemplate: nothing to erase with")
        }
        let js = try await ready()
        let stream = configuration.stream
        if let filter {
            do {
                try await io.run { try Self.purge(js, stream: stream, subject: filter) }
            } catch {
                throw SinkError(.retry(after: nil), "jetstream: erasure: purge of \(stream): \(error)")
            }
            logger.info("jetstream: purged a user's subjects", metadata: ["request": "\(request.id)", "stream": "\(stream)"])
        }
        guard let subject = configuration.erasureSubject else { return nil }
        let message = JetStreamMessage(subject: subject, payload: request.message, messageID: "erasure-" + request.id)
        let ackWait = Duration.milliseconds(configuration.ackTimeoutMilliseconds)
        let pending = await io.run { js.publish([message], ackWait: ackWait) }
        switch await pending.acknowledgements(timeout: ackWait).first {
        case .success(let ack)?:
            return "seq \(ack.sequence)"
        case .failure(let error)?:
            throw SinkError(.retry(after: nil), "jetstream: erasure message to \(subject): \(error)")
        case nil:
            throw SinkError(.retry(after: nil), "jetstream: erasure message to \(subject): no acknowledgement")
        }
    }

    /// ``JetStreamContext/purgeStream(_:subject:)`` with an untyped error (for the sink's thread).
    private static func purge(_ js: JetStreamContext, stream: String, subject: String) throws {
        do {
            try js.purgeStream(stream, subject: subject)
        } catch {
            throw error as any Error
        }
    }
}
