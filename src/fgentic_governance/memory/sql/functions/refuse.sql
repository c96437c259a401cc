-- requires: functions/refuse_listed
-- refuse(): raise a reason code as its SQLSTATE (class FG), the message only the code. The
-- posture floors' two codes here, every other in refuse_listed(). (Two functions because
-- 0023 wrapped the table rather than restate it; folding them is a fence change of its own.)
CREATE OR REPLACE FUNCTION fgentic_memory.refuse(p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_reason = 'POSTURE_FLOOR_DISABLED' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG040', MESSAGE = p_reason;
    ELSIF p_reason = 'POSTURE_FLOOR_CAPTURE_DISABLED' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG041', MESSAGE = p_reason;
    END IF;
    PERFORM fgentic_memory.refuse_listed(p_reason);
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.refuse(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
