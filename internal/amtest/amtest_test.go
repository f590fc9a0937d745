package amtest

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestStart(t *testing.T) {
	am := Start(t, "route: {receiver: none}\nreceivers: [{name: none}]\n")
	resp, err := http.Get(am.URL + "/api/v2/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Config struct {
			Original string `json:"original"`
		} `json:"config"`
		Cluster struct {
			Status string `json:"status"`
		} `json:"cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || st.Cluster.Status != "disabled" {
		t.Errorf("status %d, cluster %q: want 200 and clustering disabled", resp.StatusCode, st.Cluster.Status)
	}
	if st.Config.Original == "" {
		t.Errorf("Alertmanager reports no configuration")
	}
}
