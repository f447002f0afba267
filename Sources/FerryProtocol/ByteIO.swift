// Little-endian integer reads and writes over byte buffers: the only byte-twiddling in the module.
// `package`: our targets (FerryStorage's codecs) share them; applications linking Ferry do not see
// them.

extension Array where Element == UInt8 {
    @inlinable
    mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    /// Appends `count` bytes that `write` stores into a stack buffer: one append for a run of
    /// fixed-size fields instead of one per field.
    @inlinable
    mutating func appendBytes(_ count: Int, _ write: (UnsafeMutableRawBufferPointer) -> Void) {
        withUnsafeTemporaryAllocation(byteCount: count, alignment: 8) { buffer in
            write(buffer)
            append(contentsOf: UnsafeRawBufferPointer(buffer))
        }
    }
}

extension UnsafeRawBufferPointer {
    /// Reads a little-endian integer at `offset` (unaligned). The caller has checked the bounds.
    @inlinable
    package func loadLE<T: FixedWidthInteger>(at offset: Int, as: T.Type) -> T {
        T(littleEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

extension UnsafeMutableRawBufferPointer {
    @inlinable
    func storeLE<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        storeBytes(of: value.littleEndian, toByteOffset: offset, as: T.self)
    }
}

/// Reads a little-endian integer from `bytes` at `offset`. The caller has checked the bounds.
@inlinable
package func readLE<T: FixedWidthInteger>(_ bytes: [UInt8], at offset: Int, as type: T.Type = T.self) -> T {
    bytes.withUnsafeBytes { $0.loadLE(at: offset, as: T.self) }
}

/// Appends `value` to `bytes` in little-endian order.
@inlinable
package func appendLE<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    bytes.appendLE(value)
}
