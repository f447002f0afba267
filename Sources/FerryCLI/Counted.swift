/// `1 dead letter`, `3 dead letters`: a count and its noun, plural unless the count is one (the
/// CLI's summary lines; the noun's plural is its `s` form).
package func counted(_ count: Int, _ noun: String) -> String {
    "\(count) \(noun)\(count == 1 ? "" : "s")"
}
