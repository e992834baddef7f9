package agent

import (
	"fenced.io/fenced/pkg/config"
)

// readSecretFile reads a file holding a secret under the permission rule of
// config.CheckSecretFile, checked on the file actually opened: a file group
// or others may write is refused, and one every user may read is logged as
// a warning once per process.
//
// The warning goes to slog.Default(), not to Options.Logger: readKey takes
// no logger, and its call site is not changed here.
func readSecretFile(path string) ([]byte, error) {
	data, warning, err := config.ReadSecretFile(path)
	if err != nil {
		return nil, err
	}
	config.WarnSecretFileOnce(nil, path, warning)
	return data, nil
}
