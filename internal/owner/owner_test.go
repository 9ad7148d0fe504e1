package owner

import (
	"strings"
	"testing"
)

// Redact masks URL passwords and secret-looking assignments, and leaves
// the rest of a command line as it was.
func TestRedactMasksPasswordsAndSecretAssignments(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// URLs' passwords, and a bare user:password@host's.
		{"mysql://root:S3cr3t@db/prod", "mysql://root:xxxxx@db/prod"},
		{"psql postgres://u:p%40ss@h:5432/db -c 'select 1'", "psql postgres://u:xxxxx@h:5432/db -c 'select 1'"},
		{"curl https://u:a@b/c@host/x", "curl https://u:xxxxx@host/x"},
		{"mongo --host u:hunter2@db", "mongo --host u:xxxxx@db"},
		// Headers' and YAML's name: value, and curl's -u user:password (a review's).
		{"curl -H 'Authorization: Bearer abc123' -u admin:hunter2 http://h/", "curl -H 'Authorization: xxxxx' -u admin:xxxxx http://h/"},
		{"X-Api-Key: abc", "X-Api-Key: xxxxx"},
		{"password: hunter2", "password: xxxxx"},
		{"SECRET:abc", "SECRET:xxxxx"},
		{"curl --user=admin:hunter2 http://h/", "curl --user=admin:xxxxx http://h/"},
		{"mongo --host=u:hunter2@db", "mongo --host=u:xxxxx@db"},
		// NAME=VALUE after a blank, ';', '(', a quote, or at the start.
		{"env PGPASSWORD=hunter2 pg_dump", "env PGPASSWORD=xxxxx pg_dump"},
		{"sh -c cd /tmp;PGPASSWORD=hunter2 sleep 2", "sh -c cd /tmp;PGPASSWORD=xxxxx sleep 2"},
		{"(PGPASSWORD=hunter2 psql)", "(PGPASSWORD=xxxxx psql)"},
		{"true&&PGPASSWORD=hunter2 psql|cat", "true&&PGPASSWORD=xxxxx psql|cat"},
		{`nightly: "PGPASSWORD=hunter2" psql`, `nightly: "PGPASSWORD=xxxxx" psql`},
		{"export DB_PASSWORD='hunter 2'", "export DB_PASSWORD=xxxxx"},
		{"PASSWORD=abc'd e'\"f g\"h x", "PASSWORD=xxxxx x"},
		{`export DB_PASSWORD="hunter 2" && go`, "export DB_PASSWORD=xxxxx && go"},
		{"API_TOKEN=abc client_secret=def", "API_TOKEN=xxxxx client_secret=xxxxx"},
		// The names that say secret: pass, pwd, secret, token, auth,
		// credential, and a name that ends in key.
		{"REDISCLI_AUTH=hunter2 redis-cli", "REDISCLI_AUTH=xxxxx redis-cli"},
		{"STRIPE_KEY=sk_live_abc ./bill", "STRIPE_KEY=xxxxx ./bill"},
		{"AWS_SECRET_ACCESS_KEY=wJalr/K7MDENG aws s3 ls", "AWS_SECRET_ACCESS_KEY=xxxxx aws s3 ls"},
		{"API_KEY=k1 APIKEY=k2 apikey=k3", "API_KEY=xxxxx APIKEY=xxxxx apikey=xxxxx"},
		{"GITHUB_TOKEN=ghp_abc gh pr list", "GITHUB_TOKEN=xxxxx gh pr list"},
		{"MYSQL_PWD=hunter2 GOOGLE_CREDENTIALS=c mysql", "MYSQL_PWD=xxxxx GOOGLE_CREDENTIALS=xxxxx mysql"},
		// --name=value flags whose name says secret.
		{"./job --db-password=hunter2 --api_key=k1 --n=3", "./job --db-password=xxxxx --api_key=xxxxx --n=3"},
		{"./job --token='a b' --auth=basic", "./job --token=xxxxx --auth=xxxxx"},
		// "name": "value", as JSON (or Python) writes it.
		{`{"password":"hunter2"}`, `{"password":xxxxx}`},
		{`{"user": "u", "api_key": "a\"b c", "n": 1}`, `{"user": "u", "api_key": xxxxx, "n": 1}`},
		{`{'token': 'abc'}`, `{'token': xxxxx}`},
		{`{"password":"x","user":"y"} {"token":123}`, `{"password":xxxxx,"user":"y"} {"token":xxxxx}`},
		// Left as they are: no secret in them.
		{"dlock run --key=lock:x -- ./job", "dlock run --key=lock:x -- ./job"},
		{"KEY=lock:x ./job", "KEY=lock:x ./job"},
		{"sh -c 'echo hi'", "sh -c 'echo hi'"},
		{"http://host/path", "http://host/path"},
		{"redis://127.0.0.1:6379/0 https://example.com/a", "redis://127.0.0.1:6379/0 https://example.com/a"},
		{"rsync -a src/ user@host:dst/", "rsync -a src/ user@host:dst/"},
		{"git clone git@github.com:o/r.git", "git clone git@github.com:o/r.git"},
		{"sleep 30", "sleep 30"},
		// What cannot be told: a password with a blank in a URL, or given
		// as an argument of its own.
		{"psql postgresql://u:hun ter2@db/x", "psql postgresql://u:hun ter2@db/x"},
		{"mysql --password hunter2 -p hunter3", "mysql --password hunter2 -p hunter3"},
	} {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
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
