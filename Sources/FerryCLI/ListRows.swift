import Foundation

/// What `ferry deadletter list` and `ferry quarantine list` print before their text lines: with
/// `--json` the rows as one JSON array (sorted keys), else `none` when there are no rows. Returns
/// whether that was all; the caller prints its text lines otherwise.
func printedJSONOrNone(_ rows: [[String: Any]], json: Bool, none: String) throws -> Bool {
    if json {
        let data = try JSONSerialization.data(withJSONObject: rows, options: [.sortedKeys])
        print(String(decoding: data, as: UTF8.self))
        return true
    }
    if rows.isEmpty {
        print(none)
        return true
    }
    return false
}
