package owner

import (
	"strings"
	"testing"
)

// Redact masks URL passwords and secret-looking assignments, and leaves
// the rest of a command line as it was.
func TestRedactMasksPasswordsAndSecretAssignments(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://root:S3cr3t@db/prod":                      "mysql://root:xxxxx@db/prod",
		"psql postgres://u:p%40ss@h:5432/db -c 'select 1'": "psql postgres://u:xxxxx@h:5432/db -c 'select 1'",
		"curl https://u:a@b/c@host/x":                      "curl https://u:xxxxx@host/x",
		"env PGPASSWORD=hunter2 pg_dump":                   "env PGPASSWORD=xxxxx pg_dump",
		"./job --db-password=hunter2 --api_key=k1 --n=3":   "./job --db-password=xxxxx --api_key=xxxxx --n=3",
		"API_TOKEN=abc client_secret=def":                  "API_TOKEN=xxxxx client_secret=xxxxx",
		"redis://127.0.0.1:6379/0 https://example.com/a":   "redis://127.0.0.1:6379/0 https://example.com/a",
		"rsync -a src/ user@host:dst/":                     "rsync -a src/ user@host:dst/",
		"sleep 30":                                         "sleep 30",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// Encode stores no password of a URL in Label or Program.
func TestEncodeRedactsLabelAndProgram(t *testing.T) {
	rec, err := Encode(Record{Program: "sync mysql://root:S3cr3t@db", Label: "PGPASSWORD=hunter2 ./dump"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rec, "S3cr3t") || strings.Contains(rec, "hunter2") || !strings.Contains(rec, "root:xxxxx@db") {
		t.Fatalf("record %s keeps a secret", rec)
	}
}
