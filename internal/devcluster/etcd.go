package devcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

// EtcdGet returns the value etcd holds at key, as the API server stored
// it (for a custom resource, /registry/<group>/<plural>/<namespace>/<name>:
// its JSON, at the storage version it was encoded with), or nil when
// there is none. It reads through etcd's JSON gateway with the API
// server's own client certificate. For tests that check what is stored,
// not what the API serves.
func (c *Cluster) EtcdGet(ctx context.Context, key string) ([]byte, error) {
	hc, err := pki{dir: filepath.Join(c.dataDir, "pki")}.client("apiserver-etcd-client", 10*time.Second)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))})
	if err != nil {
		return nil, err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(c.ports["etcd"]) + "/v3/kv/range"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd range %s: %s: %s", key, resp.Status, data)
	}
	var out struct {
		KVs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("etcd range %s: %w", key, err)
	}
	if len(out.KVs) == 0 {
		return nil, nil
	}
	return base64.StdEncoding.DecodeString(out.KVs[0].Value)
}
