import Foundation

/// A control reply as the agent writes it: encoded from its FerryProtocol type, then written with
/// its keys sorted as `JSONSerialization` sorts them (numerically and ignoring case, unlike
/// `JSONEncoder`'s `.sortedKeys`), so the bytes are those of every earlier version. Shared with
/// the protocol test vectors.
package func controlReplyJSON(_ value: some Encodable) -> [UInt8] {
    guard let encoded = try? JSONEncoder().encode(value), let object = try? JSONSerialization.jsonObject(with: encoded),
          let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
        return Array(#"{"ok":false}"#.utf8)
    }
    return Array(data)
}
