// tests/serve/test_server_load.c — bounded load test on loopback: 12 concurrent clients, 240
// requests mixing streaming, non-streaming, chat and mid-stream disconnects, against 4 slots.
// Asserts zero failed requests, no leaked slots afterwards, and flat memory: RSS after a second
// identical round is within 10% (+8 MiB) of RSS after the first (allocations are per request).
#include "tests/test.h"
#include "tests/serve/http_client.h"
#include "tests/serve/server_fixture.h"
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CLIENTS 12
#define PER_CLIENT 10

static server_fixture F;
static int failures, done_ok, cancelled;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *client(void *arg) {
    int id = (int)(intptr_t)arg;
    char body[512];
    for (int i = 0; i < PER_CLIENT; i++) {
        int kind = (id + i) % 4;
        int n = 4 + (id * 7 + i) % 12;
        if (kind == 3) { // disconnect mid-stream
            snprintf(body, sizeof body, "{\"prompt\":\"client %d request %d\",\"n_predict\":64,\"stream\":true}", id, i);
            int rc = http_stream_first_then_close(F.port, "/completion", body, NULL);
            pthread_mutex_lock(&mu);
            if (rc == 0) cancelled++;
            else failures++;
            pthread_mutex_unlock(&mu);
            continue;
        }
        const char *path = kind == 2 ? "/v1/chat/completions" : "/completion";
        if (kind == 2)
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"hello %d/%d\"}],\"max_tokens\":%d,\"seed\":%d}", id, i, n, i);
        else
            snprintf(body, sizeof body, "{\"prompt\":\"client %d request %d\",\"n_predict\":%d,\"stream\":%s,\"seed\":%d}",
                     id, i, n, kind == 1 ? "true" : "false", i);
        http_resp r;
        int rc = http_request(F.port, "POST", path, body, strlen(body), NULL, &r);
        bool ok = rc == 0 && r.status == 200;
        if (ok && kind != 1) { // whole JSON
            json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
            ok = j != NULL;
            json_decref(j);
        } else if (ok) ok = strstr(r.body, "\"stop\":true") != NULL; // stream reached its final event
        if (!ok) fprintf(stderr, "client %d request %d failed: status %d %s\n", id, i, r.status, r.body ? r.body : "");
        pthread_mutex_lock(&mu);
        if (ok) done_ok++;
        else failures++;
        pthread_mutex_unlock(&mu);
        if (rc == 0) http_resp_free(&r);
    }
    return NULL;
}

static void round_of_load(void) {
    pthread_t th[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) pthread_create(&th[i], NULL, client, (void *)(intptr_t)i);
    for (int i = 0; i < CLIENTS; i++) pthread_join(th[i], NULL);
}

static int busy_slots(void) {
    http_resp r;
    if (http_request(F.port, "GET", "/slots", NULL, 0, NULL, &r) != 0) return -1;
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    int busy = 0;
    for (size_t i = 0; i < json_array_size(j); i++) busy += json_is_true(json_object_get(json_array_get(j, i), "is_processing"));
    json_decref(j);
    http_resp_free(&r);
    return busy;
}

int main(void) {
    if (fixture_model(&F, "tiny") != 0) return printf("FAIL: cannot generate the tiny model\n"), 1; // a bug, not a missing tool
    const char *args[] = {"-np", "4", "-c", "256", "--queue", "64", NULL};
    if (fixture_start(&F, args) != 0) {
        CHECK(0, "server did not start");
        return test_done("test_server_load");
    }
    round_of_load();
    sleep(1);
    long rss1 = fixture_rss_kb(&F);
    round_of_load();
    int busy = -1;
    for (int i = 0; i < 50 && busy != 0; i++) { // cancelled streams free their slot at the next token
        busy = busy_slots();
        if (busy) usleep(100 * 1000);
    }
    long rss2 = fixture_rss_kb(&F);
    printf("ok %d, cancelled %d, failed %d; RSS %ld kB → %ld kB\n", done_ok, cancelled, failures, rss1, rss2);
    CHECK(failures == 0, "%d failed requests", failures);
    CHECK(done_ok + cancelled == 2 * CLIENTS * PER_CLIENT, "all requests accounted for");
    CHECK(busy == 0, "no leaked slots (%d busy)", busy);
    CHECK(rss1 > 0 && rss2 <= rss1 + rss1 / 10 + 8192, "memory flat: %ld → %ld kB", rss1, rss2);
    CHECK(fixture_stop(&F) == 0, "clean exit");
    return test_done("test_server_load");
}
