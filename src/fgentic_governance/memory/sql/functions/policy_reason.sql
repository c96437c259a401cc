-- The database write policy: credentials and blatant instruction overrides, normalised once,
-- each pattern behind an exact prefilter and an ASCII fast path.
CREATE OR REPLACE FUNCTION fgentic_memory.policy_reason(p_text text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- policy_text(), inline; ASCII is already NFKC and has none of the stripped characters.
    v text := CASE
        WHEN octet_length(p_text) = length(p_text)
             AND current_setting('server_encoding') = 'UTF8' THEN p_text
        ELSE translate(
            CASE WHEN current_setting('server_encoding') = 'UTF8'
                 THEN normalize(p_text, NFKC) ELSE p_text END,
            U&'\00AD\200B\200C\200D\200E\200F\2060\FEFF', '') END;
BEGIN
    RETURN CASE
        WHEN (strpos(v, '-----BEGIN ') > 0 AND v ~ '-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY')
          OR v ~ '\m(AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\M'
          OR (strpos(v, 'eyJ') > 0
              AND v ~ '\meyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}')
          OR ((strpos(v, '_') > 0 OR strpos(v, '-') > 0 OR strpos(v, 'AIza') > 0)
              AND v ~ ('\m(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}'
                  '|glpat-[A-Za-z0-9_-]{20,}|sk-(proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}'
                  '|(sk|rk|pk)_(live|test)_[A-Za-z0-9]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}'
                  '|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{30,}|syt_[A-Za-z0-9_]{10,}'
                  '|mct_[A-Za-z0-9_]{10,})'))
          OR (v ~* 'bearer'
              AND v ~* '\mbearer\s+(?=[A-Za-z._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{12,}')
          OR ((strpos(v, ':') > 0 OR strpos(v, '=') > 0)
              AND v ~* ('\m(password|passwd|pwd|passphrase|passcode|api[_-]?key|apikey'
                   '|client[_-]?secret|access[_-]?token|auth[_-]?token|secret[_-]?key'
                   '|private[_-]?key)["'']?\s*(:|=>|=)\s*["'']?[^\s"'']{3,}'))
          OR (strpos(v, '://') > 0
              AND v ~* '\m[a-z][a-z0-9+.-]{1,15}://[^\s/:@]{1,64}:[^\s/@]{1,128}@')
        THEN 'CREDENTIAL_CONTENT'
        -- Each pattern below contains one of these words.
        WHEN v ~* ('(ignore|disregard|forget|override|prompt|henceforth|now'
                   '|obey|comply|approve|bypass)')
         AND (v ~* ('\m(ignore|disregard|forget|override)\s+((all|any|the|your|my)\s+){0,2}'
                   '(previous|prior|above|earlier|preceding|system|safety)\s+'
                   '(instructions?|rules?|prompts?|guidelines?|guardrails?)\M')
          OR v ~* '\m(new|override|replace|reveal|ignore)\s+((the|your)\s+)?system\s+prompt\M'
          OR v ~* ('\m(from\s+now\s+on|henceforth)[\s,:;-]{0,3}(you|the\s+assistant'
                   '|the\s+agent)\s+(must|will|shall|should)\M')
          OR v ~* '\m(always|unconditionally|blindly)\s+(obey|comply|approve|bypass)\M')
        THEN 'HIGH_RISK_INSTRUCTION_CONTENT'
    END;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.policy_reason(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
