// records/prompts.h — prompt JSONL reader for mining and evaluation (docs/antidoom.md §2). One prompt
// per line, in any of these shapes:
//   "plain string"
//   {"prompt": "..."}                                   (also "text")
//   {"conversations": [{"from": "human"|"gpt"|"system", "value": "..."}, ...]}   (ShareGPT)
//   {"messages": [{"role": "user"|"assistant"|"system", "content": "..."}, ...]} (OpenAI)
// with an optional "source" string. Trailing assistant turns are dropped (the model answers the
// last user turn); a prompt without a user turn is an error. Sources whose name contains bfcl,
// tau, browse or search (case-insensitive) are skipped when skip_agentic is set. The antidoom
// instruction suffix can be applied to the last user message through a {prompt} template.
#ifndef BONSAI_DETECT_PROMPTS_H
#define BONSAI_DETECT_PROMPTS_H
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *role;    // "system" | "user" | "assistant"
    char *content;
} bn_msg;

typedef struct {
    bn_msg *msgs;  // {n_msgs}, ends with a user message
    int n_msgs;
    char *source;  // "" when absent
    int line;      // 1-based line in the file
} bn_prompt;

typedef struct {
    bool skip_agentic;            // skip bfcl/tau/browse/search sources (antidoom default: true)
    const char *template_;        // NULL = none; else e.g. BN_ANTIDOOM_TEMPLATE
    int max_prompts;              // 0 = all
} bn_prompt_opts;

// The antidoom instruction template (system prompt "").
extern const char *const BN_ANTIDOOM_TEMPLATE;

// bn_prompt_opts_default: returns {skip_agentic = true, template_ = NULL, max_prompts = 0}.
bn_prompt_opts bn_prompt_opts_default(void);
// bn_prompts_read: reads prompts into a malloc'd array (*out); returns the count or -1 (err has
// "path:N: ..."). *n_skipped (may be NULL) counts agentic-source lines skipped.
int bn_prompts_read(const char *path, const bn_prompt_opts *o, bn_prompt **out, int *n_skipped, char *err,
                    size_t errlen);
// bn_prompt_parse_line: parses one line into p (template applied); returns 0 or -1.
int bn_prompt_parse_line(const char *line, size_t len, const bn_prompt_opts *o, bn_prompt *p, char *err, size_t errlen);
// bn_prompt_is_agentic_source: returns true when the source name contains bfcl/tau/browse/search.
bool bn_prompt_is_agentic_source(const char *source);
// bn_prompt_apply_template: returns a malloc'd copy of tmpl with {prompt} replaced (str.format
// semantics for {{ and }}).
char *bn_prompt_apply_template(const char *tmpl, const char *prompt);
// bn_prompt_user_text: returns the last user message's content.
const char *bn_prompt_user_text(const bn_prompt *p);
// bn_prompt_free / bn_prompts_free: release one prompt / an array of n.
void bn_prompt_free(bn_prompt *p);
void bn_prompts_free(bn_prompt *p, int n);
#endif
