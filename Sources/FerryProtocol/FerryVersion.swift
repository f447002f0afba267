/// Ferry's release version: the one definition behind `ferryd --version`, `ferry --version`, the
/// HTTP sink's `User-Agent` (`ferryd/<version>`) and the Debian package's version
/// (`scripts/package-deb` reads it from this file). The Python client (`client/python`) carries
/// the same number; FerryCLITests' version test keeps them equal.
public enum FerryVersion {
    /// The version, `MAJOR.MINOR.PATCH`.
    public static let current = "0.9.0"
}
