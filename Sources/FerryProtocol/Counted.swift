/// `1 dead letter`, `3 dead letters`: a count and its noun, plural unless the count is one. The
/// plural is the noun's `s` form (`more refused message` → `2 more refused messages`). The one
/// plural rule of every module's messages and summary lines (`ferry`, `ferryd validate`, health
/// reasons, HTTP refusals).
package func counted(_ count: some BinaryInteger, _ noun: String) -> String {
    "\(count) \(noun)\(count == 1 ? "" : "s")"
}
