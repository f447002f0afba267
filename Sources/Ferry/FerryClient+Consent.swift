import FerryProtocol

/// Consent and erasure through the client: the same operations as ``FerryControl``, sent to the
/// agent this client emits to.
///
/// ```swift
/// let ferry = try FerryClient(configuration: .init(source: "settings"), logger: logger)
/// try await ferry.setConsent(.granted, for: "analytics")
/// try await ferry.enableFeatures(["analytics"])
/// ferry.track("Consent Given")
/// ```
///
/// Each call is one control request (reply timeout 60 s; a missing or crashed agent is reported at
/// once); it throws ``FerryClientError`` with code ``FerryClientError/Code/agentNotRunning`` when
/// no agent answers. Unlike ``track(_:properties:userID:anonymousID:context:)``,
/// these calls are not queued: a consent change takes effect on the agent or fails here.
extension FerryClient {
    /// A control client for the agent this client sends to (its runtime directory).
    public var control: FerryControl { FerryControl(configuration: configuration) }

    /// The whole consent state. See ``FerryControl/consentState()``.
    public func consentState() async throws -> ConsentSnapshot {
        try await control.consentState()
    }

    /// Turns runtime tracking on or off. See ``FerryControl/setTracking(_:)``.
    @discardableResult
    public func setTracking(_ enabled: Bool) async throws -> ConsentSnapshot {
        try await control.setTracking(enabled)
    }

    /// Sets the consent of a category or of `"all"`. See ``FerryControl/setConsent(_:for:)``.
    @discardableResult
    public func setConsent(_ status: ConsentStatus, for category: String) async throws -> ConsentUpdate {
        try await control.setConsent(status, for: category)
    }

    /// Sets persistence consent. See ``FerryControl/setPersistenceConsent(_:)``.
    @discardableResult
    public func setPersistenceConsent(_ status: ConsentStatus) async throws -> ConsentSnapshot {
        try await control.setPersistenceConsent(status)
    }

    /// Sets GDPR fields by wire name. See ``FerryControl/setGDPR(_:)``.
    @discardableResult
    public func setGDPR(_ fields: [String: GDPRValue]) async throws -> ConsentUpdate {
        try await control.setGDPR(fields)
    }

    /// Sets GDPR fields; nil leaves a field unchanged. See
    /// ``FerryControl/setGDPR(subjectToGDPR:dataUsage:adsPersonalization:adStorage:)``.
    @discardableResult
    public func setGDPR(
        subjectToGDPR: GDPRValue? = nil, dataUsage: GDPRValue? = nil, adsPersonalization: GDPRValue? = nil,
        adStorage: GDPRValue? = nil
    ) async throws -> ConsentUpdate {
        try await control.setGDPR(subjectToGDPR: subjectToGDPR, dataUsage: dataUsage,
                                  adsPersonalization: adsPersonalization, adStorage: adStorage)
    }

    /// Enables feature categories (`["all"]` for every one). See ``FerryControl/enableFeatures(_:)``.
    @discardableResult
    public func enableFeatures(_ features: [String]) async throws -> ConsentSnapshot {
        try await control.enableFeatures(features)
    }

    /// Disables feature categories and erases their pending events. See ``FerryControl/disableFeatures(_:)``.
    @discardableResult
    public func disableFeatures(_ features: [String]) async throws -> ConsentUpdate {
        try await control.disableFeatures(features)
    }

    /// Erases pending events of a category, or all. See ``FerryControl/purge(category:)``.
    @discardableResult
    public func purge(category: String? = nil) async throws -> PurgeReport {
        try await control.purge(category: category)
    }

    /// Erases every pending and held event of a user. See ``FerryControl/forget(userID:)``.
    @discardableResult
    public func forget(userID: String) async throws -> PurgeReport {
        try await control.forget(userID: userID)
    }

    /// Starts delivery on an agent waiting for it. See ``FerryControl/start()``.
    public func start() async throws {
        try await control.start()
    }

    /// The consent audit log. See ``FerryControl/consentLog(limit:)``.
    public func consentLog(limit: Int? = nil) async throws -> ConsentAuditLog {
        try await control.consentLog(limit: limit)
    }
}
