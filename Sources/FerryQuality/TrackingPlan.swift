import FerryProtocol

/// A tracking plan, compiled once per load: for each planned event (type, and name for track,
/// page and screen) the checks of its properties (traits) and context. Native format or a Segment
/// Protocols plan (docs/QUALITY.md).
public struct TrackingPlan: Sendable {
    /// Parses and compiles a plan. `source` names it in error messages (the path).
    public init(json: [UInt8], source: String) throws(QualityError) {
        throw .invalidPlan(file: source, path: "$", message: "plan compilation is not implemented yet")
    }

    /// Reads and compiles the plan at `path`.
    public static func load(path: String) throws(QualityError) -> TrackingPlan {
        try TrackingPlan(json: try FileAccess.read(path), source: path)
    }

    /// What the plan names, for `ferryd validate`: `track Order Completed (properties: 4 rules)`.
    public var summary: [String] { [] }
}
