package session

// SetEUID has the session take f for the user it acts as; it returns
// the restore.
func SetEUID(f func() int) (restore func()) {
	old := geteuid
	geteuid = f
	return func() { geteuid = old }
}
