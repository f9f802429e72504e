package manifests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// MaxFilesSize is what an operator's files may weigh in their ConfigMap:
// the API server's limit on a ConfigMap's data and binaryData together.
const MaxFilesSize = 1 << 20

// operatorFiles is an operator's directory as its runners get it: the
// ConfigMap's data (text) and binaryData, and the items that put each key
// at its path, executable files with mode 0755.
type operatorFiles struct {
	// Dir is the directory read; Shown is it as the user named it, for
	// messages.
	Dir, Shown string
	Data       map[string]string
	BinaryData map[string][]byte
	Items      []corev1.KeyToPath
	// paths are the files' paths (slash-separated, relative to Dir).
	paths map[string]bool
	// left are the files left out, by path, with why.
	left map[string]string
}

// size is what the files weigh in the ConfigMap, as the API server
// counts it.
func (f *operatorFiles) size() int {
	n := 0
	for _, v := range f.Data {
		n += len(v)
	}
	for _, v := range f.BinaryData {
		n += len(v)
	}
	return n
}

// Hash is the sha256 of the ConfigMap's data and binaryData: hex of the
// sha256 of the JSON {"binaryData": {key: base64}, "data": {key: text}},
// keys sorted, as encoding/json (and Helm's toJson) write it, so that the
// chart computes the same.
func (f *operatorFiles) Hash() string {
	data, err := json.Marshal(map[string]any{"data": f.Data, "binaryData": f.BinaryData})
	if err != nil {
		panic(err) // maps of strings and bytes always marshal
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// What is never put into a runner's files: hidden entries (.git, .env,
// .netrc...), Python's byte-code caches, files whose name is a
// credential's, and files whose content is one (a PEM private key, a
// Kubernetes Secret, a kubeconfig with users).
var (
	credentialNames = []string{
		"*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx", "*.tfstate", "*.kubeconfig",
		"kubeconfig", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "credentials", "credentials.*",
	}
	privateKey   = []byte("PRIVATE KEY-----")
	secretKind   = regexp.MustCompile(`(?m)^kind:\s*["']?Secret["']?\s*(#.*)?$|"kind"\s*:\s*"Secret"`)
	configKind   = regexp.MustCompile(`(?m)^kind:\s*["']?Config["']?\s*(#.*)?$`)
	configUsers  = regexp.MustCompile(`(?m)^users:`)
	invalidInKey = regexp.MustCompile(`[^-._a-zA-Z0-9]`)
)

// credential says why a file looks like a credential, or "".
func credential(name string, content []byte) string {
	lower := strings.ToLower(name)
	for _, p := range credentialNames {
		if ok, _ := path.Match(p, lower); ok {
			return "its name is a credential's (" + p + ")"
		}
	}
	switch {
	case bytes.Contains(content, privateKey):
		return "it holds a private key"
	case secretKind.Match(content):
		return "it holds a Kubernetes Secret"
	case configKind.Match(content) && configUsers.Match(content):
		return "it is a kubeconfig with users"
	}
	return ""
}

// readOperatorFiles reads dir, recursively, as a runner gets it. Hidden
// entries and __pycache__ are skipped; files that look like credentials
// are left out (recorded in left); symbolic links are left out, since
// what they point to may be anywhere. It fails past MaxFilesSize, naming
// the largest files.
func readOperatorFiles(operator, dir, shown string) (*operatorFiles, error) {
	f := &operatorFiles{Dir: dir, Shown: shown, Data: map[string]string{}, BinaryData: map[string][]byte{}, paths: map[string]bool{}, left: map[string]string{}}
	if dir == "" {
		return f, nil
	}
	type file struct {
		path string
		size int
	}
	var files []file
	keys := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		name := e.Name()
		if strings.HasPrefix(name, ".") || name == "__pycache__" {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case e.IsDir():
			return nil
		case e.Type()&fs.ModeSymlink != 0:
			f.left[rel] = "it is a symbolic link"
			return nil
		case !e.Type().IsRegular():
			return nil
		}
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if why := credential(name, content); why != "" {
			f.left[rel] = why
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		key := configMapKey(rel, keys)
		keys[key] = true
		item := corev1.KeyToPath{Key: key, Path: rel}
		if info.Mode()&0o111 != 0 {
			item.Mode = ptr.To(int32(0o755))
		}
		f.Items = append(f.Items, item)
		f.paths[rel] = true
		if isText(content) {
			f.Data[key] = string(content)
		} else {
			f.BinaryData[key] = content
		}
		files = append(files, file{rel, len(content)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("operator %s: reading its directory %s for its runners: %w", operator, shown, err)
	}
	if total := f.size(); total > MaxFilesSize {
		slices.SortFunc(files, func(a, b file) int { return b.size - a.size })
		var largest []string
		for _, x := range files[:min(3, len(files))] {
			largest = append(largest, fmt.Sprintf("%s (%d bytes)", x.path, x.size))
		}
		return nil, fmt.Errorf("operator %s: its directory %s is %d bytes, past the %d bytes (1 MiB) of the ConfigMap %s-files its runners get it from; the largest: %s. Keep only what its handlers need in the definition's directory (move data and other files elsewhere), or put them in the handlers' image",
			operator, shown, total, MaxFilesSize, operator, strings.Join(largest, ", "))
	}
	return f, nil
}

// isText reports whether content goes into a ConfigMap's data, a string
// that YAML writes and reads back unchanged: valid UTF-8 without control
// characters but tabs and line ends. Anything else is binaryData.
func isText(content []byte) bool {
	if !utf8.Valid(content) {
		return false
	}
	for _, b := range content {
		if b < 0x20 && b != '\t' && b != '\n' && b != '\r' || b == 0x7f {
			return false
		}
	}
	return true
}

// configMapKey is the ConfigMap key of the file at rel: rel itself when it
// is a valid key, else rel with / as . and other characters as _, made
// unique among keys; the item's path puts it back at rel.
func configMapKey(rel string, keys map[string]bool) string {
	key := invalidInKey.ReplaceAllString(strings.ReplaceAll(rel, "/", "."), "_")
	if len(key) > 240 {
		sum := sha256.Sum256([]byte(rel))
		key = key[:240] + "-" + hex.EncodeToString(sum[:4])
	}
	for i, base := 2, key; keys[key]; i++ {
		key = fmt.Sprintf("%s-%d", base, i)
	}
	return key
}
