/// Ferry's release version: the one definition behind `ferryd --version`, `ferry --version` and
/// the Debian package's version (`scripts/package-deb` reads it from this file).
public enum FerryVersion {
    /// The version, `MAJOR.MINOR.PATCH`.
    public static let current = "0.9.0"
}
