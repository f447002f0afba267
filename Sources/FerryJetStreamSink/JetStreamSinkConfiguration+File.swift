import FerryAgent

extension JetStreamSinkConfiguration {
    /// The keys of a `"type": "jetstream"` sink object in the agent's JSON file, applied to
    /// `box` (unknown keys are errors, as everywhere in the file):
    ///
    /// ```json
    /// "sink": {
    ///   "type": "jetstream",
    ///   "servers": ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"],
    ///   "subjectTemplate": "ferry.events.{category}.{type}",
    ///   "stream": "FERRY", "createStream": true, "streamSubjects": ["ferry.events.>"],
    ///   "replicas": 3, "duplicateWindowSeconds": 120,
    ///   "maxInFlight": 256, "ackTimeoutMilliseconds": 5000,
    ///   "connectTimeoutMilliseconds": 2000, "reconnectWaitMilliseconds": 250,
    ///   "credentialsFile": "/etc/ferry/nats.creds", "tokenFile": "/etc/ferry/nats.token",
    ///   "lineFormat": 3, "eventsPerMessage": 1, "messageMaxBytes": 524288
    /// }
    /// ```
    static func fields(_ box: FieldBox<JetStreamSinkConfiguration>) -> [String: FieldReader.Field] {
        [
            "type": .choice(["jetstream"]) { _ in },
            "servers": .strings { box.value.servers = $0 },
            "subjectTemplate": .string { box.value.subjectTemplate = $0 },
            "stream": .string { box.value.stream = $0 },
            "createStream": .bool { box.value.createStream = $0 },
            "streamSubjects": .strings { box.value.streamSubjects = $0 },
            "replicas": .int { box.value.replicas = $0 },
            "duplicateWindowSeconds": .int { box.value.duplicateWindowSeconds = $0 },
            "maxInFlight": .int { box.value.maxInFlight = $0 },
            "ackTimeoutMilliseconds": .int { box.value.ackTimeoutMilliseconds = $0 },
            "connectTimeoutMilliseconds": .int { box.value.connectTimeoutMilliseconds = $0 },
            "reconnectWaitMilliseconds": .int { box.value.reconnectWaitMilliseconds = $0 },
            "credentialsFile": .string { box.value.credentialsFile = $0 },
            "tokenFile": .string { box.value.tokenFile = $0 },
            "lineFormat": .int { box.value.lineFormat = $0 },
            "eventsPerMessage": .int { box.value.eventsPerMessage = $0 },
            "messageMaxBytes": .int { box.value.messageMaxBytes = $0 },
            "erasure": .object(["subject": .string { box.value.erasureSubject = $0 }]),
        ]
    }
}
