package agent

import (
	"log/slog"

	"fenced.io/fenced/pkg/config"
)

// readSecretFile reads a file holding a secret under the permission rule of
// config.CheckSecretFile, checked on the file actually opened: a file group
// or others may write is refused, and one every user may read is logged as
// a warning to log once per process.
func readSecretFile(path string, log *slog.Logger) ([]byte, error) {
	data, warning, err := config.ReadSecretFile(path)
	if err != nil {
		return nil, err
	}
	config.WarnSecretFileOnce(log, path, warning)
	return data, nil
}
