import FerryCLI

// `ferry`: everything is in FerryCLI (its commands, their unit tests beside them).
FerryMain.main()
