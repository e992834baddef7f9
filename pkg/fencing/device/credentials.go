package device

// Credentials supplies a BMC user name and password. Password is called for
// every new session, so a rotated secret file takes effect without a restart;
// it must never be logged.
type Credentials struct {
	Username string
	Password func() (string, error)
}
